"""Shards: several source tables routed into one sink table (``Route``, cdc/model/rules.py).

A routed sink table holds the rows of each of its shards (source tables) side by side, with the
shard's source names in ``_cdc_source_database`` and ``_cdc_source_table``. Every row-range
operation of a sink is a range of ``_cdc_chunk`` (sinks/writer.py), so in a routed table that
column is the shard's tag followed by the key's text: a shard's rows are exactly the range
``[tag, tag end)`` and a split's rows the range of its tagged bounds. Replacing a split, committing
data files, pruning a merge's files and clustering then stay inside one shard unchanged, even where
two shards hold the same key values. What acts on a whole source table (a TRUNCATE, a column's
DEFAULT filled in, a merge's matches) is limited to the shard's range, and the position a stream
records with its commits is kept per shard (sinks/delta/sink.py): a shard's TRUNCATE, re-snapshot or
replayed batch touches only its own rows. A table that is not routed has no tag, and its sink table
is written exactly as it always was.

The shards share one type per column (``fit_shards``): the widest of theirs when the route is first
planned, then the table's, which a later shard's own types must widen into; each shard's route
records the wider types it is written with (``Route.column_types``, sinks/arrow_rows.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule, route_of
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.sinks.arrow_rows import (
    arrow_schema,
    arrow_type,
    row_key_columns,
    sink_type_text,
    widens_into,
    widest,
)

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
    route = route_of(rule)
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
    return SinkTarget(sink_table_id(table_id, rule), table_id, route_of(rule))


def sink_target(schema: TableSchema) -> SinkTarget:
    """Where the rows of ``schema``'s table land, by its rule's route."""
    return captured_target(schema.table_id, schema.table_rule)


def sink_table_ids(tables: Iterable[tuple[TableId, TableRule | None]]) -> list[TableId]:
    """The sink tables that source tables (each with its rule) write into, each once, sorted: what
    upkeep and maintenance act on (a routed table once, not once per shard)."""
    return sorted({sink_table_id(table_id, rule) for table_id, rule in tables})


@dataclass
class ShardFit:
    """How planned shards fit their routed sink table (``fit_shards``)."""

    #: the sink table's type of each column (lower-case name) the shards have
    types: dict[str, pa.DataType] = field(default_factory=dict)
    #: planned shards that do not fit the columns written before, each with why
    unfit: dict[TableId, str] = field(default_factory=dict)
    #: why the planned shards do not fit one another, if they do not
    problems: list[str] = field(default_factory=list)

    def typed(self, shard: TableSchema) -> TableSchema:
        """``shard`` with the table's wider types of its columns recorded in its route."""
        assert shard.table_rule is not None and shard.route is not None  # a shard of a route
        widened = tuple((c.name.lower(), sink_type_text(self.types[c.name.lower()])) for c in shard.columns
                        if not arrow_type(c).equals(self.types[c.name.lower()]))
        route = replace(shard.route, column_types=widened)
        return replace(shard, table_rule=replace(shard.table_rule, route=route))


def fit_shards(written: Sequence[TableSchema], planned: Sequence[TableSchema]) -> ShardFit:
    """The sink table's column types for the ``planned`` shards of a route, beside the shards
    ``written`` before (as the pipeline remembers them, with their types in the table). A column
    written keeps its type: a Delta table cannot widen a column in place, so a planned shard fits
    only where its own type widens into it (``widest``); a column not written yet takes the widest
    type of the planned shards that have it. Every shard needs the same row key (names, in order)."""
    fit = ShardFit()
    for schema in written:
        for f in arrow_schema(schema):
            if f.name in schema.column_names:
                fit.types.setdefault(f.name.lower(), f.type)
    fixed = set(fit.types)
    key_of = written[0] if written else (planned[0] if planned else None)
    for shard in planned:
        problems = []
        if key_of is not None and row_key_columns(shard) != row_key_columns(key_of):
            problems.append(f"{shard.table_id} has key ({', '.join(shard.key_columns)}) and {key_of.table_id} "
                            f"({', '.join(key_of.key_columns)})")
        for column in shard.columns:
            own, table = arrow_type(column), fit.types.get(column.name.lower())
            if column.name.lower() in fixed and (table is None or not widens_into(own, table)):
                problems.append(f"column {column.name} is {column.column_type} ({own} in the sink) in {shard.table_id}, "
                                f"which the sink table's {table} cannot hold")
        if problems:
            fit.unfit[shard.table_id] = "; ".join(problems)
    met: dict[str, TableSchema] = {}
    for shard in planned:
        if shard.table_id in fit.unfit:
            continue
        for column in shard.columns:
            name, own = column.name.lower(), arrow_type(column)
            if name in fixed:
                continue
            wider = widest(own, fit.types.get(name, own))
            if wider is None:
                other = met[name]
                fit.problems.append(f"column {column.name} is {column.column_type} ({own} in the sink) in "
                                    f"{shard.table_id} and {other.column(column.name).column_type} "
                                    f"({fit.types[name]}) in {other.table_id}, which no one type holds")
                continue
            fit.types[name] = wider
            met.setdefault(name, shard)
    return fit
