"""Shards: several source tables routed into one sink table (``Route``, cdc/model/rules.py).

A routed sink table holds the rows of each of its shards (source tables) side by side, with the
shard's source names in ``_cdc_source_database`` and ``_cdc_source_table``. Every row-range
operation of a sink is a range of ``_cdc_chunk`` (sinks/writer.py), so in a routed table that
column is the shard's tag followed by the key's text: a shard's rows are exactly the range
``[tag, tag end)`` and a split's rows the range of its tagged bounds. Replacing a split, committing
data files, pruning a merge's files and clustering then stay inside one shard unchanged, even where
two shards hold the same key values. What acts on a whole source table (a TRUNCATE, a column's
DEFAULT filled in, a merge's matches) is limited to the shard's range, and the position a stream
records with its commits is kept per shard (sinks/delta.py): a shard's TRUNCATE, re-snapshot or
replayed batch touches only its own rows. A table that is not routed has no tag, and its sink table
is written exactly as it always was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_type, row_key_columns

#: a tag is the shard's id and this character; no key text holds it, and the next character ("/")
#: sorts right after it and before every key character, so ``id + "/"`` ends the shard's range
_TAG_END, _RANGE_END = ".", "/"


def shard_id(source: TableId) -> str:
    """The shard of source table ``source``: 16 hex digits of a hash of its quoted names, stable
    across runs and versions (rows in a sink table carry it)."""
    return hashlib.sha256(source.quoted.encode()).hexdigest()[:16]


def shard_bounds(shard: str, start: str | None = None, end: str | None = None) -> tuple[str, str]:
    """The ``_cdc_chunk`` range of the key range ``[start, end)`` (key texts, None: open) in shard ``shard``."""
    tag = shard + _TAG_END
    return tag + (start or ""), (shard + _RANGE_END) if end is None else tag + end


def sink_table_id(table_id: TableId, rule: TableRule | None) -> TableId:
    """The sink table that source table ``table_id`` writes into under ``rule``."""
    route = None if rule is None else rule.route
    return table_id if route is None else TableId(route.database, route.table)


@dataclass(frozen=True)
class SinkTarget:
    """Where one source table's rows land: the sink table, and for a shard of a routed one its id
    (empty for a table of its own)."""

    table_id: TableId
    source: TableId
    route: Route | None = None

    @property
    def shard(self) -> str:
        return "" if self.route is None else shard_id(self.source)

    @property
    def tag(self) -> str:
        """What each ``_cdc_chunk`` of the table's rows starts with."""
        return self.shard and self.shard + _TAG_END

    def bounds(self, start: str | None, end: str | None) -> tuple[str | None, str | None]:
        """The ``_cdc_chunk`` range of the key range ``[start, end)`` (key texts, None: open) in this
        target; for a shard never open, so that no write reaches past it."""
        return shard_bounds(self.shard, start, end) if self.shard else (start, end)


def captured_target(table_id: TableId, rule: TableRule | None) -> SinkTarget:
    """Where the rows of source table ``table_id`` land under ``rule``."""
    return SinkTarget(sink_table_id(table_id, rule), table_id, None if rule is None else rule.route)


def sink_target(schema: TableSchema) -> SinkTarget:
    """Where the rows of ``schema``'s table land, by its rule's route."""
    return captured_target(schema.table_id, schema.table_rule)


def sink_table_ids(tables: Iterable[tuple[TableId, TableRule | None]]) -> list[TableId]:
    """The sink tables that source tables (each with its rule) write into, each once, sorted: what
    upkeep and maintenance act on (a routed table once, not once per shard)."""
    return sorted({sink_table_id(table_id, rule) for table_id, rule in tables})


def shard_conflicts(shards: Sequence[TableSchema]) -> list[str]:
    """Why ``shards`` (schemas as captured, two or more) cannot share one sink table, if they cannot:
    their row keys differ in names, order or type (a row of one would not be matched like a row of
    another), or a column has a different sink type in two of them (one Delta column holds one type)."""
    problems = []
    first = shards[0]
    types: dict[str, tuple[str, TableSchema]] = {}
    for shard in shards:
        if row_key_columns(shard) != row_key_columns(first):
            problems.append(f"{shard.table_id} has key ({', '.join(shard.key_columns)}) and {first.table_id} "
                            f"({', '.join(first.key_columns)})")
        for column in shard.columns:
            sink_type = str(arrow_type(column))
            seen = types.setdefault(column.name, (sink_type, shard))
            if seen[0] != sink_type:
                problems.append(f"column {column.name} is {column.column_type} ({sink_type} in the sink) in "
                                f"{shard.table_id} and {seen[1].column(column.name).column_type} ({seen[0]}) in "
                                f"{seen[1].table_id}")
    return problems
