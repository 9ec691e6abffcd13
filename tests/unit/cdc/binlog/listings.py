"""Listed binlog events (``SHOW BINLOG EVENTS`` rows) built by hand, for the MySQL layouts the suite's
MariaDB does not write."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.binlog.listing import ListedEvent


def listed_events(*kinds: tuple[str, str]) -> list[ListedEvent]:
    """One event per (kind, info), 100 bytes each, from binlog.000001:1000 on."""
    events, position = [], 1000
    for kind, info in kinds:
        events.append(ListedEvent("binlog.000001", position, kind, position + 100, info))
        position += 100
    return events
