"""The finished-split filter of the binlog phase (Flink CDC's ``shouldEmit``).

Given every finished split with its high watermark, a row change is emitted iff its key lies in a
finished split and it happened after that split's high watermark; once past the largest high
watermark of its table, every change of the table is emitted (the table's "pure binlog" phase).
The binlog phase starts at the smallest high watermark over all splits.

Splits of a table are contiguous key ranges, so a key is placed by binary search over the split
starts, in the column's database order (records/ordering.py). A change written after a DDL that
renamed or dropped the chunk key column carries no chunk key: it cannot be placed, is emitted, and
the stream freezes the table at that DDL (its key changed: it needs a re-snapshot), so none of its
changes after it are applied.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering


@dataclass
class _TableSplits:
    chunk_key: str
    ordering: KeyOrdering
    splits: list[FinishedSplit]
    starts: list[Any]  # sort keys of split starts, excluding the first split (open below)
    max_high_watermark: BinlogOffset


class FinishedSplitFilter:
    def __init__(self, finished: Iterable[FinishedSplit], orderings: Mapping[TableId, KeyOrdering]):
        by_table: dict[TableId, list[FinishedSplit]] = {}
        for f in finished:
            by_table.setdefault(f.split.table_id, []).append(f)
        self._tables: dict[TableId, _TableSplits] = {}
        for table_id, splits in by_table.items():
            splits.sort(key=lambda f: f.split.index)
            ordering = orderings[table_id]
            _check_contiguous(table_id, splits)
            starts = ordering.sort_keys([f.split.start for f in splits[1:]])
            self._tables[table_id] = _TableSplits(
                chunk_key=splits[0].split.chunk_key,
                ordering=ordering,
                splits=splits,
                starts=starts,
                max_high_watermark=max(f.high_watermark for f in splits),
            )

    def start_offset(self) -> BinlogOffset:
        """Where the binlog phase starts: the smallest high watermark of all splits."""
        if not self._tables:
            raise ConfigurationError("No finished splits: snapshot at least one table before streaming")
        return min(f.high_watermark for t in self._tables.values() for f in t.splits)

    def max_high_watermark(self, table_id: TableId) -> BinlogOffset:
        return self._tables[table_id].max_high_watermark

    def may_emit(self, table_id: TableId, offset: BinlogOffset) -> bool:
        """Whether a change of the table at ``offset`` can be emitted, whatever its key: the table is
        captured and ``offset`` is after the smallest high watermark of its splits."""
        table = self._tables.get(table_id)
        return table is not None and any(offset > f.high_watermark for f in table.splits)

    def event_decision(self, table_id: TableId, offset: BinlogOffset, names: Collection[str]) -> bool | None:
        """``filter``'s decision for every change of one row event at once (its columns: ``names``):
        False when the table is not captured, True past its largest high watermark (or when the
        changes carry no chunk key), None when each change's key decides."""
        table = self._tables.get(table_id)
        if table is None:
            return False
        if offset > table.max_high_watermark or table.chunk_key not in names:
            return True
        return None

    def should_emit(self, record: ChangeRecord) -> bool:
        return self.filter([record])[0]

    def filter(self, records: list[ChangeRecord]) -> list[bool]:
        """Decide a batch at once, so that collation weights are fetched in one round trip. Records
        past their table's largest high watermark are emitted without a key lookup, which keeps the
        pure binlog phase cheap."""
        decisions = [False] * len(records)
        pending: dict[TableId, list[int]] = {}
        for i, record in enumerate(records):
            table = self._tables.get(record.table_id)
            if table is None:
                continue
            if record.offset > table.max_high_watermark or table.chunk_key not in record.image:
                decisions[i] = True
            else:
                pending.setdefault(record.table_id, []).append(i)
        for i, split in self._lookup(records, pending):
            decisions[i] = records[i].offset > split.high_watermark
        return decisions

    def locate(self, records: list[ChangeRecord]) -> list[FinishedSplit | None]:
        """The split holding each record's key (None: table not captured, or no chunk key)."""
        located: list[FinishedSplit | None] = [None] * len(records)
        pending: dict[TableId, list[int]] = {}
        for i, record in enumerate(records):
            table = self._tables.get(record.table_id)
            if table is not None and table.chunk_key in record.image:
                pending.setdefault(record.table_id, []).append(i)
        for i, split in self._lookup(records, pending):
            located[i] = split
        return located

    def _lookup(self, records: list[ChangeRecord], pending: dict[TableId, list[int]]) -> Iterator[tuple[int, FinishedSplit]]:
        for table_id, indexes in pending.items():
            table = self._tables[table_id]
            keys = table.ordering.sort_keys([records[i].image[table.chunk_key] for i in indexes])
            for i, key in zip(indexes, keys):
                yield i, table.splits[bisect.bisect_right(table.starts, key)]


def _check_contiguous(table_id: TableId, splits: list[FinishedSplit]) -> None:
    indexes = [f.split.index for f in splits]
    if indexes != list(range(len(splits))):
        raise ConfigurationError(
            f"Finished splits of {table_id} are incomplete or duplicated (indexes {indexes[:20]}...): "
            "every split of the plan must finish before the binlog phase starts; re-run the missing chunks."
        )
    if splits[0].split.start is not None or splits[-1].split.end is not None:
        raise ConfigurationError(f"Splits of {table_id} do not cover the whole key space (first/last not open)")
    for a, b in zip(splits, splits[1:]):
        if a.split.end != b.split.start:
            raise ConfigurationError(f"Splits {a.split.split_id} and {b.split.split_id} are not adjacent")
