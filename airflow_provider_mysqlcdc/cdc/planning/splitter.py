"""Cutting a table into snapshot splits, with Flink CDC's rules.

- The chunk key is the configured column, else the first column of the row key.
- Integral and DECIMAL keys whose distribution factor ``(max - min + 1) / rows`` lies within
  ``[distribution_factor_lower, distribution_factor_upper]`` are cut arithmetically, with a step of
  ``factor * split_rows``: no query per split.
- Other keys are cut at boundaries the database returns:
  ``SELECT MAX(k) FROM (SELECT k FROM t WHERE k >= ? ORDER BY k LIMIT split_rows)``; when that
  returns the previous boundary (a run of equal values, e.g. the first column of a composite key),
  the next distinct value is taken.
- The first split is open below, the last open above, so rows inserted beyond the current
  minimum or maximum during the snapshot still fall into a split.

Boundary comparisons use records/ordering.py, i.e. the database's own order (collations).
"""

from __future__ import annotations

import decimal
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableSchema, quote_identifier, with_params
from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit, key_range_sql
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.records.values import converter_for, read_expression

log = logging.getLogger(__name__)

#: Types Flink CDC cuts arithmetically when evenly distributed.
EVENLY_SPLITTABLE_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal"})
#: Integer types: a split of such a key is cut into Spark partitions by key width alone (``cut_evenly``).
INTEGER_TYPES = EVENLY_SPLITTABLE_TYPES - {"decimal"}
#: Below this many rows (by the statistics) an exact COUNT(*) is cheap enough to take.
EXACT_COUNT_BELOW_ROWS = 200_000


@dataclass(frozen=True)
class SplitOptions:
    split_rows: int = 8096
    distribution_factor_lower: float = 0.05
    distribution_factor_upper: float = 1000.0
    chunk_key_column: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.split_rows, int) or self.split_rows < 1:
            raise ConfigurationError(f"split_rows must be a positive integer, got {self.split_rows!r}")
        if not 0 < self.distribution_factor_lower <= self.distribution_factor_upper:
            raise ConfigurationError(
                "distribution factor bounds must satisfy 0 < lower <= upper, got "
                f"lower={self.distribution_factor_lower} upper={self.distribution_factor_upper}"
            )


class TableSplitter:
    """Plans the splits of one table. Reads only aggregates and boundaries, never whole rows."""

    def __init__(
        self,
        conn: pymysql.connections.Connection,
        schema: TableSchema,
        options: SplitOptions,
        ordering: KeyOrdering | None = None,
    ):
        self.conn = conn
        self.schema = schema
        self.options = options
        self.chunk_key = schema.chunk_key_column(options.chunk_key_column)
        self.column: Column = schema.column(self.chunk_key)
        self.ordering = ordering or KeyOrdering(self.column, lambda: conn)
        self._normalise = converter_for(self.column, key=True) or (lambda value: value)
        # every statement here runs with parameters (an empty tuple where it has none)
        self._key_sql = with_params(read_expression(self.column))
        self._key_name = with_params(quote_identifier(self.chunk_key))
        self._table_sql = with_params(schema.table_id.quoted)
        self._within: SnapshotSplit | None = None
        self._range_sql, self._range_args = "", ()

    # --- public ----------------------------------------------------------------------------------
    def split(self, within: SnapshotSplit | None = None) -> list[SnapshotSplit]:
        """Cut the table, or only the key range of ``within`` (a split cut into Spark partitions)."""
        self._use_range(within)
        low, high = self._min_max()
        if low is None:
            bounds: list[tuple[Any, Any]] = [(None, None)]
        else:
            rows = self._row_count()
            factor = self._distribution_factor(low, high, rows)
            if factor is not None:
                log.info("%s: even split, %s rows, distribution factor %.3f", self.schema.table_id, rows, factor)
                bounds = self._even_bounds(low, high, rows, factor)
            else:
                log.info("%s: splitting at boundaries queried from the database", self.schema.table_id)
                bounds = list(self._queried_bounds(low, high))
        if within is not None:  # the outer ends are the enclosing split's, not open
            bounds[0] = (within.start, bounds[0][1])
            bounds[-1] = (bounds[-1][0], within.end)
        return [
            SnapshotSplit(self.schema.table_id, index, self.chunk_key, start, end)
            for index, (start, end) in enumerate(bounds)
        ]

    def cut_evenly(self, within: SnapshotSplit, parts: int) -> list[SnapshotSplit] | None:
        """Cut a split into at most ``parts`` ranges of equal key width, from its smallest and largest
        key alone (two index lookups, no count: a split already holds about the rows it should, and
        the number of ranges is fixed, so a sparse key only makes them uneven). None: the key is not
        an integer."""
        if self.column.data_type not in INTEGER_TYPES:
            return None
        self._use_range(within)
        low, high = self._min_max()
        bounds = [(None, None)] if low is None else even_bounds(low, high, max(1, -(-(high - low + 1) // parts)))
        bounds[0] = (within.start, bounds[0][1])
        bounds[-1] = (bounds[-1][0], within.end)
        return [SnapshotSplit(self.schema.table_id, index, self.chunk_key, start, end)
                for index, (start, end) in enumerate(bounds)]

    # --- queries ---------------------------------------------------------------------------------
    def _query_value(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            row = cur.fetchone()
        value = row[0] if row else None
        return None if value is None else self._normalise(value)

    def _min_max(self) -> tuple[Any, Any]:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT MIN({self._key_sql}), MAX({self._key_sql}) FROM {self._table_sql}{self._range_sql}",
                        self._range_args)
            low, high = cur.fetchone()
        if low is None:
            return None, None
        return self._normalise(low), self._normalise(high)

    def _use_range(self, within: SnapshotSplit | None) -> None:
        self._within = within
        self._range_sql, self._range_args = key_range_sql(within) if within else ("", ())

    def count_rows(self, within: SnapshotSplit) -> int:
        """Exact number of rows in a split's key range."""
        self._use_range(within)
        return self._row_count()

    def _row_count(self) -> int:
        if self._within is not None:
            with self.conn.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM {self._table_sql}{self._range_sql}", self._range_args)
                return int(cur.fetchone()[0])
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (self.schema.table_id.database, self.schema.table_id.table),
            )
            row = cur.fetchone()
            approximate = int(row[0] or 0) if row else 0
            if approximate < EXACT_COUNT_BELOW_ROWS:
                cur.execute(f"SELECT COUNT(*) FROM {self._table_sql}", ())
                return int(cur.fetchone()[0])
        return approximate

    def _upper_bound(self) -> tuple[str, tuple[Any, ...]]:
        if self._within is None or self._within.end is None:
            return "", ()
        return f" AND {self._key_name} < %s", (self._within.end,)

    def _next_split_max(self, start: Any) -> Any:
        upper, upper_args = self._upper_bound()
        return self._query_value(
            f"SELECT MAX(k) FROM (SELECT {self._key_sql} AS k FROM {self._table_sql} "
            f"WHERE {self._key_name} >= %s{upper} ORDER BY {self._key_name} LIMIT {int(self.options.split_rows)}) t",
            (start, *upper_args),
        )

    def _next_distinct(self, after: Any) -> Any:
        upper, upper_args = self._upper_bound()
        return self._query_value(
            f"SELECT MIN({self._key_sql}) FROM {self._table_sql} WHERE {self._key_name} > %s{upper}",
            (after, *upper_args),
        )

    # --- arithmetic ------------------------------------------------------------------------------
    def _distribution_factor(self, low: Any, high: Any, rows: int) -> decimal.Decimal | None:
        if self.column.data_type not in EVENLY_SPLITTABLE_TYPES:
            return None
        factor = distribution_factor(low, high, rows)
        lower = decimal.Decimal(str(self.options.distribution_factor_lower))
        upper = decimal.Decimal(str(self.options.distribution_factor_upper))
        return factor if factor is not None and lower <= factor <= upper else None

    def _even_bounds(self, low: Any, high: Any, rows: int, factor: decimal.Decimal) -> list[tuple[Any, Any]]:
        if rows <= self.options.split_rows:
            return [(None, None)]
        return even_bounds(low, high, even_step(factor, self.options.split_rows, self.column.numeric_scale
                                                if self.column.data_type == "decimal" else None))

    def _queried_bounds(self, low: Any, high: Any) -> Iterator[tuple[Any, Any]]:
        high_key = self.ordering.sort_key(high)
        start = None
        end = self._next_end(low, high_key)
        while end is not None:
            yield (start, end)
            start, end = end, self._next_end(end, high_key)
        yield (start, None)

    def _next_end(self, previous: Any, high_key: Any) -> Any:
        """The next boundary after ``previous``, or None when the rest fits in the last split."""
        end = self._next_split_max(previous)
        if end is not None and self.ordering.sort_key(end) == self.ordering.sort_key(previous):
            end = self._next_distinct(end)
        if end is None or self.ordering.sort_key(end) >= high_key:
            return None
        return end


def distribution_factor(low: Any, high: Any, rows: int) -> decimal.Decimal | None:
    """``(max - min + 1) / rows``: 1 for dense keys, large for sparse ones. None for an empty table."""
    if rows <= 0:
        return None
    return (decimal.Decimal(high) - decimal.Decimal(low) + 1) / decimal.Decimal(rows)


def even_step(factor: decimal.Decimal, split_rows: int, decimal_scale: int | None) -> Any:
    """Key distance covering about ``split_rows`` rows: an int, or a Decimal of the column's scale."""
    if decimal_scale is None:
        return max(int(factor * split_rows), 1)
    quantum = decimal.Decimal(1).scaleb(-decimal_scale)
    return max((factor * split_rows).quantize(quantum, rounding=decimal.ROUND_DOWN), quantum)


def even_bounds(low: Any, high: Any, step: Any) -> list[tuple[Any, Any]]:
    """Flink CDC's evenly sized splits: ``[None, low+step), [low+step, low+2*step), ..., [.., None)``."""
    bounds: list[tuple[Any, Any]] = []
    start, end = None, low + step
    while end <= high:
        bounds.append((start, end))
        start, end = end, end + step
    bounds.append((start, None))
    return bounds
