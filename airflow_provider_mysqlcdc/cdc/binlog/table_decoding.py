"""How the rows of one table map are decoded: by a row decoder (row_decoder.py) when it takes the
table, else by python-mysql-replication's rows and the value normaliser (records/values.py); and
the change records they make, with the table's rule applied (records/table_rows.py).

A table map's columns are the framing's (framing.py): python-mysql-replication's column objects, or
dump.py's ``MapColumn``s, which carry the same attributes under the same names."""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.cdc.binlog.events import RowsWritten
from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import decoder_for, layout_for
from airflow_provider_mysqlcdc.cdc.binlog.table_map import column_from_table_map
from airflow_provider_mysqlcdc.cdc.errors import LibraryNeeded
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, ChangeRows, Operation
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.records.table_rows import RowRules, update_changes
from airflow_provider_mysqlcdc.cdc.records.values import ValueNormalizer

log = logging.getLogger(__name__)

_CREATE, _UPDATE, _DELETE = Operation.CREATE.value, Operation.UPDATE.value, Operation.DELETE.value


@dataclass
class TableDecoding:
    """The decoding of one table map's rows: by a row decoder (row_decoder.py) when it takes the
    table, else by the library's rows and the normaliser."""

    library_columns: list[Any]  # held, so that its identity stays this table map's
    normalizer: ValueNormalizer
    row_decoder: Any  # None: the library decodes the table
    rules: RowRules | None = None  # the table's rule on its rows (records/table_rows.py)
    names: tuple[str, ...] = ()  # the row decoder's columns, in order
    #: the columns-present bitmap of a full row image
    full_image: bytes = field(init=False)
    #: the key of an image's value list (None: a key column is not among ``names``, or there is no key)
    key_of_values: Callable[[list[Any]], Any] | None = field(init=False)

    def __post_init__(self) -> None:
        count = len(self.library_columns)
        self.full_image = ((1 << count) - 1).to_bytes((count + 7) // 8, "little")
        keys = self.normalizer.schema.key_columns
        self.key_of_values = operator.itemgetter(*(self.names.index(k) for k in keys)) \
            if keys and set(keys) <= set(self.names) else None

    def changes(self, event: RowsWritten, table_id: TableId, offset: BinlogOffset, gtid: str | None
                ) -> tuple[list[ChangeRecord], bool]:
        """The event's row changes (an update that changes the row key becomes a delete plus a create,
        as Debezium does; the table's row filter may make an update either, or drop a change), and
        whether the row decoder decoded them (else the library did)."""
        is_update, ts = event.operation is Operation.UPDATE, event.timestamp * 1000
        images, by_row_decoder = self.images(event, is_update)
        rules, records, schema = self.rules, [], self.normalizer.schema
        if not is_update:
            op = event.operation
            is_write = op is Operation.CREATE
            for index, image in enumerate(images):
                if rules is not None:
                    if not rules.keeps(image):
                        continue
                    image = rules.masked(image)
                records.append(ChangeRecord(op, table_id, None if is_write else image, image if is_write else None,
                                            offset, index, 0, gtid, ts, schema))
            return records, by_row_decoder
        keys = self.normalizer.schema.key_columns
        for index in range(len(images) // 2):
            before, after = images[2 * index], images[2 * index + 1]
            key_changed = bool(keys) and any(before[k] != after[k] for k in keys)
            for old, new in update_changes(before, after, key_changed, rules):
                op = Operation.UPDATE if old is not None and new is not None else \
                    Operation.DELETE if new is None else Operation.CREATE
                records.append(ChangeRecord(op, table_id, old, new, offset, index, 1 if old is None else 0, gtid, ts,
                                            schema))
        return records, by_row_decoder

    def change_rows(self, event: RowsWritten, table_id: TableId, offset: BinlogOffset, gtid: str | None
                    ) -> ChangeRows | None:
        """The event's row changes as value lists (what ``changes`` makes, without a record or a dict per
        row) where the row decoder takes them and the table has no rule; else None."""
        key = self.key_of_values
        if self.rules is not None or key is None or not self._decodes(event):
            return None
        images = self.row_decoder.decode_values(event.rows)
        ts, schema, names, count = event.timestamp * 1000, self.normalizer.schema, self.names, len(images)
        if event.operation is not Operation.UPDATE:
            return ChangeRows(table_id, offset, names, images, [event.operation.value] * count, list(range(count)),
                              [0] * count, None, gtid, ts, schema)
        befores, afters = images[0::2], images[1::2]
        pairs = len(afters)
        moved = {i for i, (old, new) in enumerate(zip(befores, afters)) if key(old) != key(new)}
        if not moved:
            return ChangeRows(table_id, offset, names, afters, [_UPDATE] * pairs, list(range(pairs)), [0] * pairs,
                              befores, gtid, ts, schema)
        # a key changed: that row's delete of the old key, then the create of the new one (``changes``)
        changes: list[tuple[str, list[Any], list[Any] | None, int, int]] = []  # (op, image, before, row, part)
        for i in range(pairs):
            if i in moved:
                changes += [(_DELETE, befores[i], None, i, 0), (_CREATE, afters[i], None, i, 1)]
            else:
                changes.append((_UPDATE, afters[i], befores[i], i, 0))
        ops, kept, olds, rows, parts = (list(column) for column in zip(*changes))
        return ChangeRows(table_id, offset, names, kept, ops, rows, parts, olds, gtid, ts, schema)

    def images(self, event: RowsWritten, is_update: bool) -> tuple[list[dict[str, Any]], bool]:
        """Every row image of the event, as a dict by column name (an update's before and after
        images alternate), and whether the row decoder decoded them (else the library did)."""
        if self._decodes(event):
            return self.row_decoder.decode(event.rows), True
        if event.library is None:
            raise LibraryNeeded(f"rows of {event.table} that no row decoder takes")
        normalize, rows = self.normalizer.row, event.library.rows
        if not is_update:
            images = [normalize(_raw(row["values"], row.get("none_sources"))) for row in rows]
        else:
            images = [normalize(_raw(row[f"{side}_values"], row.get(f"{side}_none_sources")))
                      for row in rows for side in ("before", "after")]
        self._check_key_dates(images)
        return images, False

    def _check_key_dates(self, images: list[dict[str, Any]]) -> None:
        """The library gives None for a date with no calendar date, which a key column cannot hold
        (values.py keeps such keys as ``ZeroDate``): refused, for this table only (``TableFailed``)."""
        schema = self.normalizer.schema
        for name in schema.key_columns:
            column = schema.column(name)
            if column.data_type in ("date", "datetime", "timestamp") and not column.nullable \
                    and any(name in image and image[name] is None for image in images):
                raise ValueError(f"key column {name!r} holds a zero or partial date, of which python-mysql-replication "
                                 "(decoding this table: a column of it is stored in a way the row decoders leave to "
                                 "it) gives no value; update the row to a real date, then re-snapshot the table")

    def _decodes(self, event: RowsWritten) -> bool:
        """Whether the row decoder takes the event's rows: it has the table, and every column is in
        the image (a full row image)."""
        if self.row_decoder is None or event.column_count != len(self.library_columns) or event.partial:
            return False  # a partial JSON update's after images carry a diff
        full = self.full_image
        return event.present == full and (event.present_after is None or event.present_after == full)


class TableDecodings:
    """The decoding of each table map the library holds (by the identity of its column list, cleared
    when the reader moves to another binlog file), and the normaliser of each set of columns a
    table's events were written under."""

    def __init__(self, decoder: str, key_columns: Mapping[TableId, tuple[str, ...]],
                 known_columns: Mapping[TableId, Mapping[str, Column]],
                 rules: Mapping[TableId, RowRules] | None = None):
        self.decoder = decoder  # compiled, python or library (row_decoder.py)
        self.key_columns = key_columns
        self.known_columns = known_columns
        self.rules = rules or {}
        self._decodings: dict[int, TableDecoding] = {}
        self._normalizers: dict[tuple[TableId, tuple[Any, ...]], ValueNormalizer] = {}

    def clear(self) -> None:
        self._decodings.clear()

    def of(self, event: RowsWritten, table_id: TableId) -> TableDecoding:
        """How this event's rows are decoded: by the library's table map it was written under."""
        found = self._decodings.get(id(event.columns))
        if found is None or found.library_columns is not event.columns:
            normalizer = self._normalizer(event, table_id)
            schema = normalizer.schema
            layout = None if self.decoder == "library" else layout_for(event.columns, schema.columns,
                                                                       schema.key_columns)
            if layout is None and self.decoder != "library":
                log.info("rows of %s are decoded by python-mysql-replication: a column of it is stored in a way "
                         "the %s decoder leaves to the library", table_id, self.decoder)
            row_decoder = None if layout is None else decoder_for(layout, self.decoder)
            found = TableDecoding(event.columns, normalizer, row_decoder, self.rules.get(table_id),
                                  layout.names if layout is not None else ())
            self._decodings[id(event.columns)] = found
        return found

    def _normalizer(self, event: RowsWritten, table_id: TableId) -> ValueNormalizer:
        """The normaliser of rows written under this table map's columns. Its key columns are the
        schema's, unless the event was written under other columns (a batch from before or after a
        DDL that renamed or dropped one): then the table map's own primary key."""
        # everything column_from_table_map reads: a DECIMAL whose scale changed is another decoder
        signature = tuple((c.name, c.type, c.unsigned, c.character_set_name, c.collation_name,
                           getattr(c, "max_length", None), getattr(c, "decimals", None),
                           tuple(c.set_values or ()), tuple(c.enum_values or ())) for c in event.columns)
        key = (table_id, signature)
        normalizer = self._normalizers.get(key)
        if normalizer is None:
            known = self.known_columns.get(table_id, {})
            columns = tuple(column_from_table_map(c, known.get(c.name)) for c in event.columns)
            keys = self.key_columns.get(table_id, ())
            if not set(keys) <= {c.name for c in columns}:
                keys = tuple(c.name for c in event.columns if getattr(c, "is_primary", False))
            normalizer = ValueNormalizer(TableSchema(table_id, columns, keys))
            self._normalizers[key] = normalizer
        return normalizer


def _raw(values: dict[str, Any], none_sources: dict[str, str] | None) -> dict[str, Any]:
    """Undo the library's None for an empty SET (it is '' in SQL, not NULL)."""
    if none_sources:
        for name, source in none_sources.items():
            if source == "empty set":
                values[name] = ""
    return values
