"""Applying change records, in binlog order, to the rows of one table keyed by row key.

This is the upsert the split reader does over its SELECT result, and the reference a sink must
match: create/update/read replace the row with the after image, delete removes it, and a
``TableTruncated`` removes every row (the rows held are one split's, so all of them go).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.records import Operation, TableTruncated, WindowChange


class KeyedRows:
    def __init__(self, key_columns: tuple[str, ...]):
        if not key_columns:
            raise ValueError("KeyedRows needs the row key columns")
        self.key_columns = key_columns
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}

    def key_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[c] for c in self.key_columns)

    def put(self, row: dict[str, Any]) -> None:
        self.rows[self.key_of(row)] = row

    def apply(self, record: WindowChange) -> None:
        if isinstance(record, TableTruncated):
            self.rows.clear()
        elif record.op is Operation.DELETE:
            assert record.before is not None
            self.rows.pop(self.key_of(record.before), None)
        else:
            assert record.after is not None
            if record.op is Operation.UPDATE and record.before is not None:
                # Keys are equal for an update (key changes arrive as delete + create); be safe anyway.
                old_key = self.key_of(record.before)
                if old_key != self.key_of(record.after):
                    self.rows.pop(old_key, None)
            self.put(record.after)

    def apply_all(self, records: Iterable[WindowChange]) -> int:
        count = 0
        for record in records:
            self.apply(record)
            count += 1
        return count

    def __len__(self) -> int:
        return len(self.rows)
