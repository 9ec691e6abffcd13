"""The binlog events the reader acts on, the same whichever framing read them (framing.py).

Each is a small class with what the reader needs: where the event ends in its binlog file
(``end``; 0 for the artificial events a server sends on connect), its size in the file (so that its
start is known), and the header's timestamp (seconds). Events the reader does not act on are not
handed to it. They are not frozen: a frozen dataclass's ``__init__`` sets each field through
``object.__setattr__``, which made each event about a microsecond dearer, and nothing changes or
hashes them once built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.cdc.binlog.xa import Xid
from airflow_provider_mysqlcdc.cdc.model.records import Operation
from airflow_provider_mysqlcdc.cdc.model.schema import TableId


@dataclass(slots=True)
class BinlogEvent:
    end: int
    size: int
    timestamp: int


@dataclass(slots=True)
class Rotated(BinlogEvent):
    """The binlog goes on in ``next_file`` at ``position`` (also sent first, on connect)."""

    next_file: str
    position: int


@dataclass(slots=True)
class GtidStarted(BinlogEvent):
    """A transaction group begins; ``prepared_xa``: MariaDB marks it an XA transaction's."""

    gtid: str
    prepared_xa: bool


@dataclass(slots=True)
class XidCommitted(BinlogEvent):
    """A transaction committed."""


@dataclass(slots=True)
class Statement(BinlogEvent):
    """A query event: a DDL statement, ``COMMIT`` of a non-transactional engine, an XA verb."""

    schema: str
    statement: str


@dataclass(slots=True)
class XaPrepared(BinlogEvent):
    """The end of an XA transaction's group: prepared, or committed in one phase."""

    one_phase: bool
    xid: Xid


@dataclass(slots=True)
class RowsWritten(BinlogEvent):
    """A row event of a captured table: its table map's columns (the same list for every event
    written under that table map), the column count and present-columns bitmaps it was written
    with, and its row images' bytes (what follows the bitmaps). ``library``: python-mysql-replication's
    event, whose ``rows`` decode what no row decoder takes (None when framed by ``dump.py``)."""

    operation: Operation
    table: TableId
    columns: list[Any]
    column_count: int
    present: bytes
    present_after: bytes | None  # an update's after images
    partial: bool  # MySQL's partial JSON update: its after images hold a diff
    rows: memoryview
    library: Any = None

