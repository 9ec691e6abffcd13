"""One table's row changes as Arrow columns: built where they are decoded, merged by the driver.

A stream batch's changes cross from the executors to the driver as Arrow IPC, one table per
message (``TableChanges``, spark/batch_rows.py), not as pickled Python records: the per-value work
of typing a change happens on the executors, in parallel, and the driver works on columns
(filtering, the last change per key, the merge) without touching a value.

Columns, in this order:

- the change's row image (``after`` of a create or update, ``before`` of a delete) under the names
  the binlog gave its columns, typed like the sink's columns (arrow_rows.py) by the decoding side's
  schema of the table. A column that schema does not have or whose values it does not fit (changes
  written before a DDL it already reflects) takes the type Arrow infers from the values; the driver
  casts every column to its own writer's schema (``conform_changes``), so the sink decides every
  type. Where the newer schema does take older values, it is lossless wherever the sink follows the
  type change (Delta only widens types); a change it cannot follow re-snapshots the table.
- ``CHANGE_FIELDS``: the operation, the binlog offset (file, position, and the offset as one
  ordered int64), the row's place in its event (``row``, ``part``: records/model/records.py) and the
  event time in milliseconds. A change's position (sinks/base.py) is ``(version >> 32, version &
  0xFFFFFFFF, row, part)``.
- with the changelog only, ``LOG_FIELDS``: the before and after images as JSON text and the GTID
  (sinks/changelog.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, ChangeRows
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.sinks.arrow_rows import columns_table, conform_to, image_table
from airflow_provider_mysqlcdc.sinks.base import Position
from airflow_provider_mysqlcdc.sinks.changelog import image_json

CHANGE_FIELDS = (
    pa.field("_cdc_op", pa.string()),
    pa.field("_cdc_binlog_file", pa.string()),
    pa.field("_cdc_binlog_pos", pa.int64()),
    pa.field("_cdc_version", pa.int64()),
    pa.field("_cdc_row", pa.int32()),
    pa.field("_cdc_part", pa.int32()),
    pa.field("_cdc_event_ms", pa.int64()),
)
LOG_FIELDS = (pa.field("_cdc_before", pa.string()), pa.field("_cdc_after", pa.string()),
              pa.field("_cdc_gtid", pa.string()))
_CHANGE_NAMES = frozenset(f.name for f in CHANGE_FIELDS + LOG_FIELDS)
#: the epoch of an offset sits above these bits of its version (model/offset.py)
_EPOCH_SHIFT = 52
_TABLE_KEY = b"mysqlcdc.table"
_SCHEMA_KEY = b"mysqlcdc.schema"


def change_columns(schema: TableSchema | None, changes: Sequence[ChangeRecord | ChangeRows], *,
                   changelog: bool = False) -> pa.Table:
    """One table's changes (in binlog order) as change columns; ``schema``: the decoding side's
    schema of the table (None: every column's type inferred from its values). Changes as value lists
    (``ChangeRows``) are typed as they are, without a dict per row."""
    kinds = {type(c) for c in changes}
    if ChangeRows in kinds:
        if kinds == {ChangeRows} and not changelog and len({c.names for c in changes}) == 1:  # type: ignore[union-attr]
            return _rows_columns(schema, changes)  # type: ignore[arg-type]
        changes = [r for c in changes for r in (c.records() if isinstance(c, ChangeRows) else (c,))]
    records: Sequence[ChangeRecord] = changes  # type: ignore[assignment]
    data = image_table(schema, [r.image for r in records])
    change: list[list[Any]] = [
        [r.op.value for r in records], [r.offset.file for r in records], [r.offset.position for r in records],
        [r.offset.version for r in records], [r.row for r in records], [r.part for r in records],
        [r.timestamp_ms for r in records]]
    log = [[image_json(r.before) for r in records], [image_json(r.after) for r in records],
           [r.gtid for r in records]] if changelog else []
    return _with_fields(data, change, log)


def _with_fields(data: pa.Table, change: list[list[Any]], log: list[list[Any]]) -> pa.Table:
    """The image columns ``data`` with the values of ``CHANGE_FIELDS`` (and of ``LOG_FIELDS``, when given)."""
    fields = list(CHANGE_FIELDS) + (list(LOG_FIELDS) if log else [])
    columns = [pa.array(values, f.type) for values, f in zip(change + log, fields)]
    return pa.Table.from_arrays(list(data.columns) + columns, schema=pa.schema(list(data.schema) + fields))


def _rows_columns(schema: TableSchema | None, runs: Sequence[ChangeRows]) -> pa.Table:
    """``change_columns`` of ``ChangeRows``, all under the same column names."""
    names = runs[0].names
    images = runs[0].images if len(runs) == 1 else list(chain.from_iterable(r.images for r in runs))
    data = columns_table(schema, names, [list(column) for column in zip(*images)])

    def each(value: Callable[[ChangeRows], Any]) -> list[Any]:
        return list(chain.from_iterable([value(r)] * len(r) for r in runs))

    return _with_fields(data, [list(chain.from_iterable(r.ops for r in runs)), each(lambda r: r.offset.file),
                               each(lambda r: r.offset.position), each(lambda r: r.offset.version),
                               list(chain.from_iterable(r.rows for r in runs)),
                               list(chain.from_iterable(r.parts for r in runs)), each(lambda r: r.timestamp_ms)], [])


def image_names(changes: pa.Table) -> list[str]:
    return [n for n in changes.column_names if n not in _CHANGE_NAMES]


def conform_changes(changes: pa.Table, target: pa.Schema) -> tuple[pa.Table, list[str]]:
    """``changes`` with their image columns cast to ``target`` (the writer's source columns; absent
    ones NULL), and the image columns ``target`` lacks."""
    images, unknown = conform_to(changes.select(image_names(changes)), target)
    rest = [n for n in changes.column_names if n in _CHANGE_NAMES]
    return pa.Table.from_arrays(list(images.columns) + [changes.column(n) for n in rest],
                                names=images.column_names + rest), unknown


def position_at(changes: pa.Table, index: int) -> Position:
    version = changes.column("_cdc_version")[index].as_py()
    return (version >> 32, version & 0xFFFFFFFF, changes.column("_cdc_row")[index].as_py(),
            changes.column("_cdc_part")[index].as_py())


def offset_at(changes: pa.Table, index: int) -> BinlogOffset:
    version = changes.column("_cdc_version")[index].as_py()
    return BinlogOffset(changes.column("_cdc_binlog_file")[index].as_py(),
                        changes.column("_cdc_binlog_pos")[index].as_py(), epoch=version >> _EPOCH_SHIFT)


def changes_after(changes: pa.Table, position: Position | None) -> pa.Table:
    """The changes whose position is after ``position`` (all of them, but after a restart)."""
    if position is None or not changes.num_rows or position_at(changes, 0) > position:
        return changes
    file_order, offset_position, row, part = position
    version = file_order << 32 | offset_position
    versions, rows, parts = (changes.column(n) for n in ("_cdc_version", "_cdc_row", "_cdc_part"))
    later_in_event = pc.or_(pc.greater(rows, row), pc.and_(pc.equal(rows, row), pc.greater(parts, part)))
    return changes.filter(pc.or_(pc.greater(versions, version),
                                 pc.and_(pc.equal(versions, version), later_in_event)))


def changes_before(changes: pa.Table, offset: BinlogOffset) -> pa.Table:
    """The changes of events before ``offset`` (an event's changes carry the offset of its end)."""
    return changes.filter(pc.less(changes.column("_cdc_version"), offset.version))


def last_change_per_key(changes: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """Within one batch only the last change of each key matters (changes in binlog order); kept in
    binlog order."""
    if changes.num_rows < 2:
        return changes
    keys = list(key_columns)
    indexed = changes.select(keys).append_column("_cdc_index", pa.array(range(changes.num_rows), pa.int64()))
    last = indexed.group_by(keys, use_threads=False).aggregate([("_cdc_index", "max")]).column("_cdc_index_max")
    if len(last) == changes.num_rows:
        return changes
    return changes.take(last.sort())


@dataclass(frozen=True)
class TableChanges:
    """A run of one table's changes, as sent from an executor to the driver (Arrow IPC), with the
    table's schema as of them (the columns and key their binlog table map gave them, described as
    ``cdc/binlog/table_map.py`` ``schema_as_of`` does; None: not known, the driver's own applies)."""

    table_id: TableId
    data: pa.Table
    schema: TableSchema | None = None

    def to_ipc(self) -> bytes:
        metadata: dict[bytes, bytes | str] = {_TABLE_KEY: self.table_id.quoted}
        if self.schema is not None:
            metadata[_SCHEMA_KEY] = schema_json(self.schema)
        table = self.data.replace_schema_metadata(metadata)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()

    @classmethod
    def from_ipc(cls, payload: bytes) -> "TableChanges":
        table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
        metadata = table.schema.metadata
        table_id = TableId.parse(metadata[_TABLE_KEY].decode())
        schema = _schema_of(metadata[_SCHEMA_KEY]) if _SCHEMA_KEY in metadata else None
        return cls(table_id, table.replace_schema_metadata(None), schema)

    @property
    def last_offset(self) -> BinlogOffset:
        return offset_at(self.data, self.data.num_rows - 1)

    @property
    def newest_ms(self) -> int:
        return pc.max(self.data.column("_cdc_event_ms")).as_py() or 0


#: the JSON of the schemas a process sent lately, by identity (each held, so that its id stays its own)
_SCHEMA_TEXTS: dict[int, tuple[TableSchema, bytes]] = {}


def schema_json(schema: TableSchema) -> bytes:
    """A schema as the JSON a ``TableChanges`` carries (made once per schema object)."""
    held = _SCHEMA_TEXTS.get(id(schema))
    if held is not None and held[0] is schema:
        return held[1]
    if len(_SCHEMA_TEXTS) >= 256:
        _SCHEMA_TEXTS.clear()
    text = json.dumps(schema.to_dict(), separators=(",", ":")).encode()
    _SCHEMA_TEXTS[id(schema)] = (schema, text)
    return text


@functools.lru_cache(maxsize=256)
def _schema_of(text: bytes) -> TableSchema:
    """The schema of a ``TableChanges``'s JSON; one object per text, so equal schemas compare at once."""
    return TableSchema.from_dict(json.loads(text))
