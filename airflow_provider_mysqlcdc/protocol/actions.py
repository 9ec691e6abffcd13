"""Closed vocabularies that travel between processes: a value outside them is refused by name."""

from __future__ import annotations

import enum

from airflow_provider_mysqlcdc.cdc.errors import ProtocolError


class PlanAction(enum.StrEnum):
    """What one DAG run does for one table (planning/changes.py ``decide_action``)."""

    SNAPSHOT = "snapshot"  # never captured (or removed and named again): read every split
    STREAM_ONLY = "stream-only"  # never captured, startup mode latest/offset: stream from there
    KEEP = "keep"  # captured already: not read again
    RESNAPSHOT = "resnapshot"  # read the whole table again, planned afresh
    RESNAPSHOT_SPLITS = "resnapshot-splits"  # read again the captured splits overlapping a key range

    @classmethod
    def parse(cls, value: str) -> "PlanAction":
        try:
            return cls(value)
        except ValueError:
            raise ProtocolError(f"unknown plan action {value!r} (known: {', '.join(a.value for a in cls)})") from None


class StartupMode(enum.StrEnum):
    """Where a table that was never captured starts (the DAG's ``startup_mode`` param)."""

    INITIAL = "initial"  # snapshot, then stream
    LATEST = "latest"  # no snapshot: stream from the binlog head
    OFFSET = "offset"  # no snapshot: stream from a given binlog offset or MariaDB GTID position
    EARLIEST = "earliest"  # no snapshot: stream from the oldest binlog the server still has
    TIMESTAMP = "timestamp"  # no snapshot: stream from the first transaction at or after a time


class StreamMode(enum.StrEnum):
    """How the stream job runs (the stream task adds ``skip``: no stream at all)."""

    AVAILABLE_NOW = "available-now"  # catch up to the binlog head as of start, then exit
    CONTINUOUS = "continuous"  # micro-batches every trigger interval until stopped
