"""A table's rule (cdc/model/rules.py) on its rows, where they are read: the row filter decides on
the values as the server holds them, then the masks apply (records/masking.py).

On the snapshot path a row is kept or not (``row``). On the binlog path a change keeps CDC's
meaning (``update_changes``): an insert or delete passes when its row passes the filter; an update
whose row leaves the filter deletes it, one whose row enters the filter inserts it, one that stays
inside updates it; so the sink holds exactly the rows the filter keeps, as of each change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, SchemaChangedError
from airflow_provider_mysqlcdc.cdc.model.schema import TableSchema
from airflow_provider_mysqlcdc.cdc.records.masking import ColumnMasks
from airflow_provider_mysqlcdc.cdc.records.row_filter import RowFilter, check_row_filter

Row = dict[str, Any]


class RowRules:
    """One table's rule on its rows; ``of`` gives None for a table without a rule."""

    def __init__(self, schema: TableSchema, masks: ColumnMasks | None):
        assert schema.table_rule is not None
        self.schema = schema
        self.where = schema.table_rule.where
        self.masks = masks

    @classmethod
    def of(cls, schema: TableSchema, salt: Callable[[], str]) -> "RowRules | None":
        if schema.table_rule is None or not schema.table_rule.acts_on_rows:
            return None  # a rule that only routes the rows leaves them as they are
        return cls(schema, ColumnMasks.of(schema, salt) if schema.table_rule.masks_or_leaves_out else None)

    @cached_property
    def row_filter(self) -> RowFilter | None:
        """Compiled on first use. A filter the table's schema no longer fits (a DDL dropped or retyped a
        column it reads) stops this table only; the next plan says what to change."""
        if self.where is None:
            return None
        try:
            return check_row_filter(self.where, self.schema)
        except ConfigurationError as exc:
            raise SchemaChangedError(f"{exc} (the table's schema changed under its row filter)") from exc

    def keeps(self, row: Row) -> bool:
        found = self.row_filter
        return found is None or found.keeps(row)

    def masked(self, row: Row) -> Row:
        return row if self.masks is None else self.masks.row(row)

    def row(self, row: Row) -> Row | None:
        """A snapshot row as the sink takes it, or None when the filter leaves it out."""
        return self.masked(row) if self.keeps(row) else None


def update_changes(before: Row, after: Row, key_changed: bool,
                   rules: RowRules | None) -> Iterator[tuple[Row | None, Row | None]]:
    """An update's (before, after) images as the changes the sink takes, under the table's ``rules``
    (None: every row as it is): an update ``(b, a)``, or a delete ``(b, None)`` and/or an insert
    ``(None, a)`` when the row key changed (as Debezium does) or the row left or entered the filter."""
    was, now = (True, True) if rules is None else (rules.keeps(before), rules.keeps(after))
    if rules is not None:
        before, after = rules.masked(before), rules.masked(after)
    if was and now and not key_changed:
        yield before, after
        return
    if was:
        yield before, None
    if now:
        yield None, after
