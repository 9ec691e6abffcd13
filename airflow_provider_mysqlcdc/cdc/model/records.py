"""The change-record model shared by the snapshot and the binlog paths (Debezium-like).

``op`` is read / create / update / delete; ``before`` and ``after`` are normalised rows
(records/values.py). An update never changes the row key: the binlog reader turns such an update
into a delete of the old key plus a create of the new one, at the same offset, as Debezium does.

Records order by ``(offset, row, part)``: ``offset`` is the binlog offset at the end of the event
the row came in, ``row`` its index among the event's rows, ``part`` 0 for the delete and 1 for the
create of a key change. Snapshot reads carry the high watermark of their split as ``offset``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema


class Operation(str, enum.Enum):
    READ = "r"
    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"


@dataclass(slots=True)
class ChangeRecord:
    """One row change. Not frozen: hundreds of thousands are built per second on the hot path, and
    a frozen dataclass costs a ``object.__setattr__`` per field; treat instances as immutable."""

    op: Operation
    table_id: TableId
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    offset: BinlogOffset
    row: int = 0
    part: int = 0
    gtid: str | None = None
    timestamp_ms: int = 0
    #: the table as the binlog described it at this change: the columns and key of the table map its
    #: row event was written under (one object per table map, shared by its changes); None where the
    #: change was not read from the binlog
    schema: TableSchema | None = None

    @property
    def image(self) -> dict[str, Any]:
        """The row this record is about: ``after`` for read/create/update, ``before`` for delete."""
        image = self.before if self.op is Operation.DELETE else self.after
        assert image is not None
        return image

    @property
    def order_key(self) -> tuple[int, int, int, int]:
        file_number, position = self.offset.sort_key
        return (file_number, position, self.row, self.part)

    def is_after(self, watermark: BinlogOffset) -> bool:
        """True when this change happened after ``watermark`` (so a split read at it does not contain it)."""
        return self.offset > watermark

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op.value,
            "source": {
                "db": self.table_id.database,
                "table": self.table_id.table,
                "file": self.offset.file,
                "pos": self.offset.position,
                "row": self.row,
                "part": self.part,
                "gtid": self.gtid,
                "ts_ms": self.timestamp_ms,
            },
            "before": self.before,
            "after": self.after,
        }


@dataclass(slots=True)
class ChangeRows:
    """The row changes of one row event as value lists: what its ``ChangeRecord``s hold, without a
    record or a dict per row (the stream's reads type them for the sink by column:
    sinks/change_columns.py).

    Change ``i`` is about the image ``images[i]`` (its values in the order of ``names``); its
    operation is ``ops[i]`` (a value of ``Operation``), its place in the event ``rows[i]`` and
    ``parts[i]``. An update's change also has its before image, ``befores[i]`` (None for the delete
    and create of a key change; ``befores`` is None for other events)."""

    table_id: TableId
    offset: BinlogOffset
    names: tuple[str, ...]
    images: list[list[Any]]
    ops: list[str]
    rows: list[int]
    parts: list[int]
    befores: list[list[Any] | None] | None = None
    gtid: str | None = None
    timestamp_ms: int = 0
    #: as ``ChangeRecord.schema``
    schema: TableSchema | None = None

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def first_key(self) -> tuple[int, int, int]:
        """Where its first change sorts in a batch: the offset's version, its row and part."""
        return (self.offset.version, self.rows[0], self.parts[0])

    def records(self) -> list[ChangeRecord]:
        """The same changes as records."""
        names, befores = self.names, self.befores
        out = []
        for i, op in enumerate(self.ops):
            image = dict(zip(names, self.images[i]))
            operation = Operation(op)
            old = befores[i] if befores is not None else None
            before = image if operation is Operation.DELETE else \
                dict(zip(names, old)) if operation is Operation.UPDATE and old is not None else None
            out.append(ChangeRecord(operation, self.table_id, before, None if operation is Operation.DELETE else image,
                                    self.offset, self.rows[i], self.parts[i], self.gtid, self.timestamp_ms,
                                    self.schema))
        return out


class TableEventKind(str, enum.Enum):
    TRUNCATED = "truncated"  # every row removed, without row events
    DROPPED = "dropped"
    RENAMED = "renamed"  # the table now lives under ``TableChange.other``
    REPLACED = "replaced"  # another table now holds this name (CREATE OR REPLACE, RENAME x TO this)
    CREATED = "created"  # CREATE TABLE (a no-op with IF NOT EXISTS when the table already existed)
    ROWS_CHANGED = "rows-changed"  # rows removed or swapped without row events (partitions, tablespaces)
    ALTERED = "altered"  # columns, keys or options changed
    BINLOG_PURGED = "binlog-purged"  # the stream found binlog it needed for the table purged (not DDL)
    #: a key or chunk key column renamed or dropped, or the key changed (found by the stream when it
    #: reloads the schema after an ALTER): the sink's rows cannot be matched to later changes
    KEY_CHANGED = "key-changed"
    #: a column's type changed in a way the sink's table cannot follow (Delta refuses the new type), or
    #: a column was given a name the sink reserves (``_cdc_...``)
    TYPE_CHANGED = "type-changed"
    #: a change of the table could not be decoded, typed or written (``TableFailed``): one table's
    #: data or schema, not the pipeline's, so only this table stops
    FAILED = "failed"

    @property
    def ends_table(self) -> bool:
        """After this event the name no longer holds the table whose rows the sink has."""
        return self in (TableEventKind.DROPPED, TableEventKind.RENAMED, TableEventKind.REPLACED)

    @property
    def freezes(self) -> bool:
        """After this event none of the table's changes can be applied exactly until it is re-snapshotted."""
        return self.ends_table or self in (TableEventKind.BINLOG_PURGED, TableEventKind.KEY_CHANGED,
                                           TableEventKind.TYPE_CHANGED, TableEventKind.FAILED)


@dataclass(frozen=True)
class TableChange:
    kind: TableEventKind
    table: TableId
    other: TableId | None = None  # the new name of a rename; the other table of a partition exchange
    added_columns: tuple[str, ...] = ()  # ALTERED: the columns its ADD [COLUMN] clauses add
    #: ALTERED: a clause may remove or rename a column (DROP [COLUMN], CHANGE [COLUMN], RENAME COLUMN)
    removes_columns: bool = False


@dataclass(frozen=True)
class TableTruncated:
    """Every row of ``table_id`` removed at ``offset``: a ``TRUNCATE`` writes no row events, so a
    window replay (a split's, or an activation's) carries it in binlog order among the row changes."""

    table_id: TableId
    offset: BinlogOffset


@dataclass(frozen=True)
class TableFailed:
    """A change of ``table_id`` at ``offset`` (the end of its event; an XA group's: its commit) could not
    be decoded or typed: ``reason`` names the error. None of the table's changes from that event on
    are sent; the stream freezes the table there (``TableEventKind.FAILED``), the others go on."""

    table_id: TableId
    offset: BinlogOffset
    reason: str


#: what a window replay applies over a split's rows, in binlog order
WindowChange = ChangeRecord | TableTruncated


#: what a stream does when binlog it needs was purged: fail with the way out, or re-snapshot exactly
#: the tables that needed it (``BinlogPurged``)
ON_BINLOG_PURGED = ("fail", "resnapshot")


@dataclass(frozen=True)
class BinlogPurged:
    """Binlog the stream needed was purged: its changes from ``lost_from`` up to ``resumed_at`` (the
    oldest offset the server still has) are gone. ``tables`` are the tables that needed them; None:
    every captured table whose splits were read before ``resumed_at``."""

    lost_from: BinlogOffset
    resumed_at: BinlogOffset
    tables: tuple[TableId, ...] | None = None


@dataclass(frozen=True)
class SchemaChangeEvent:
    """A DDL statement seen in the binlog, with what it does to each table (binlog/ddl.py).
    Never dropped: the reader hands it to the caller."""

    database: str
    statement: str
    offset: BinlogOffset
    changes: tuple[TableChange, ...] = field(default_factory=tuple)
    timestamp_ms: int = 0

    @property
    def table_ids(self) -> tuple[TableId, ...]:
        return tuple(dict.fromkeys(c.table for c in self.changes))

    def changes_of(self, table_id: TableId) -> list[TableChange]:
        return [c for c in self.changes if c.table == table_id]
