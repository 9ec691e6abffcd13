"""A pipeline's ``columns``, ``row_filters`` and ``route`` settings: per table (a name or a pattern, as ``tables``
takes them), which columns reach the sink and which are masked (Debezium's ``column.include.list``,
``column.exclude.list``, ``column.mask.hash.*``, ``column.truncate.to.*``; Flink CDC's projection),
and which rows (a predicate, cdc/records/row_filter.py; Flink CDC's transform ``filter``)::

    columns={
        "shop.customers": {"exclude": ["notes"], "hash": ["email"], "truncate": {"address": 10},
                           "null": ["ssn"]},
        "crm.*": {"include": ["id", "name", "updated_at"]},
    }

and which sink table they go to: ``route`` writes every table an entry matches (the shards) into
one sink table (Flink CDC's ``route``, sinks/routing.py)::

    route={"shop_\\d+.orders": "shop.orders"}                          # shards' keys may repeat
    route={"shop_\\d+.orders": {"sink": "shop.orders", "key": "global"}}  # keys unique across shards

A bare target (``"orders"``) lies in the entry's database, when the entry names one.

A table takes the rule of the first entry that names it, else of the first pattern that matches
it. ``captured_schema`` turns a table's schema as the server has it into the schema the pipeline
captures: the columns kept, each marked with its mask. Key columns identify a row and order the
chunks: ``include`` keeps them without naming them, and they can be neither excluded nor masked. A
salt for ``hash`` comes from the source connection (never from here): records/masking.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.records.row_filter import check_row_filter, parse_row_filter
from airflow_provider_mysqlcdc.cdc.source.selection import (
    TableEntry,
    TablePattern,
    entry_database,
    entry_text,
    parse_entry,
)

_KEYS = ("include", "exclude", "hash", "truncate", "null")
#: the column types ``truncate`` may cut: text by characters, bytes by bytes
_TRUNCATABLE = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "binary", "varbinary",
                          "tinyblob", "blob", "mediumblob", "longblob", "json"})


def _names(value: Any, what: str) -> tuple[str, ...]:
    if not value:
        return ()
    if isinstance(value, str):
        value = [v for v in value.split(",")]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigurationError(f"{what} must be a list of column names, e.g. ['email', 'phone'], got {value!r}.")
    return tuple(v.strip() for v in value)


def parse_rule(value: Any, entry: str) -> TableRule:
    """One table's rule as a DAG gives it; a clear error for anything malformed."""
    where = f"columns[{entry!r}]"
    if not isinstance(value, dict):
        raise ConfigurationError(f"{where} must be a dict of {', '.join(_KEYS)}, got {value!r}.")
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise ConfigurationError(f"{where} has unknown option(s) {', '.join(unknown)}: the options are "
                                 f"{', '.join(_KEYS)}.")
    if value.get("include") is not None and value.get("exclude"):
        raise ConfigurationError(f"{where} gives both include and exclude: give one of them (as Debezium takes "
                                 "column.include.list or column.exclude.list).")
    truncate = value.get("truncate") or {}
    if not isinstance(truncate, dict) or not all(isinstance(n, str) and isinstance(k, int) and not isinstance(k, bool)
                                                 and k >= 1 for n, k in truncate.items()):
        raise ConfigurationError(f"{where}['truncate'] must map column names to a length of at least 1, e.g. "
                                 f"{{'address': 10}}, got {truncate!r}.")
    include = value.get("include")
    rule = TableRule(None if include is None else _names(include, f"{where}['include']"),
                     _names(value.get("exclude"), f"{where}['exclude']"), _names(value.get("hash"), f"{where}['hash']"),
                     tuple(truncate.items()), _names(value.get("null"), f"{where}['null']"))
    masked = list(rule.masked)
    twice = sorted({n for n in masked if masked.count(n) > 1})
    if twice:
        raise ConfigurationError(f"{where} masks column(s) {', '.join(twice)} twice: give each one mask.")
    dropped = sorted(n for n in set(masked) if not rule.keeps(n))
    if dropped:
        raise ConfigurationError(f"{where} masks column(s) {', '.join(dropped)} that it leaves out: a column left "
                                 "out never reaches the sink, so it needs no mask.")
    return rule


_ROUTE_KEYS = ("sink", "key")
#: ``key``: row keys unique within each shard (the shard's names join the key), or across all of them
_ROUTE_KEY_SCOPES = ("shard", "global")


def parse_route(value: Any, entry: TableEntry) -> Route:
    """One entry's route as a DAG gives it: the sink table's name, or a dict of ``sink`` and ``key``."""
    where = f"route[{entry_text(entry)!r}]"
    example = "'shop.orders' or {'sink': 'shop.orders', 'key': 'global'}"
    if isinstance(value, str):
        value = {"sink": value}
    if not isinstance(value, dict):
        raise ConfigurationError(f"{where} must be the sink table's name or a dict of sink and key, e.g. {example}, "
                                 f"got {value!r}.")
    unknown = sorted(set(value) - set(_ROUTE_KEYS))
    if unknown:
        raise ConfigurationError(f"{where} has unknown option(s) {', '.join(unknown)}: the options are sink and key.")
    key = value.get("key", "shard")
    if key not in _ROUTE_KEY_SCOPES:
        raise ConfigurationError(f"{where}['key'] must be 'shard' (row keys may repeat across the shards: the "
                                 "source's names join the key) or 'global' (they are unique across all shards), "
                                 f"got {key!r}.")
    target = value.get("sink")
    if not isinstance(target, str) or not target.strip():
        raise ConfigurationError(f"{where} needs the sink table's name, e.g. {example}, got {target!r}.")
    database = entry_database(entry)
    try:
        sink = TableId.parse(target, database) if "." not in target and "`" not in target else parse_entry(target)
    except ConfigurationError:
        raise ConfigurationError(
            f"{where}: the sink table {target!r} names no database and the entry's database is a pattern: write "
            f"'database.{target.strip()}' (the sink table's database folder).") from None
    if isinstance(sink, TablePattern):
        raise ConfigurationError(f"{where}: the sink table {target!r} is a pattern; name one table, e.g. {example}.")
    return Route(sink.database, sink.table, global_key=key == "global")


def _setting(value: Any, name: str, example: str) -> dict[Any, Any]:
    """A per-table setting as a dict, or its JSON text; None or empty: {}."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigurationError(f"{name} is not valid JSON ({exc}): write {example}.") from exc
    if not isinstance(value, dict):
        raise ConfigurationError(f"{name} must map a table (a name or a pattern) to its rule, e.g. {example}, "
                                 f"got {value!r}.")
    return value


def _first(entries: tuple[tuple[TableEntry, Any], ...], table_id: TableId) -> tuple[Any, TableEntry | None]:
    """The value of the entry naming ``table_id``, else of the first pattern matching it."""
    for entry, value in entries:
        if entry == table_id:
            return value, entry
    for entry, value in entries:
        if not isinstance(entry, TableId) and entry.matches(table_id):
            return value, entry
    return None, None


def _overlap(one: TableEntry, other: TableEntry) -> bool:
    """Whether two entries are known to name a table in common: a name the other matches, or the
    same pattern (two different patterns may or may not)."""
    if isinstance(one, TableId) and isinstance(other, TableId):
        return one == other
    if isinstance(one, TableId) and isinstance(other, TablePattern):
        return other.matches(one)
    if isinstance(other, TableId) and isinstance(one, TablePattern):
        return one.matches(other)
    return entry_text(one) == entry_text(other)


@dataclass(frozen=True)
class TableRules:
    """The ``columns``, ``row_filters`` and ``route`` settings: per table entry a column rule, a row
    filter, a sink table shared with other tables (see the module doc)."""

    entries: tuple[tuple[TableEntry, TableRule], ...] = ()
    filters: tuple[tuple[TableEntry, str], ...] = ()
    routes: tuple[tuple[TableEntry, Route], ...] = ()

    @classmethod
    def parse(cls, columns: Any = None, row_filters: Any = None, route: Any = None) -> "TableRules":
        """The settings as dicts, or their JSON text; None or empty: no rule."""
        routes = tuple((entry, parse_route(target, entry)) for entry, target in (
            (parse_entry(str(e)), t) for e, t in _setting(route, "route", "{'shop_\\d+.orders': 'shop.orders'}").items()))
        rules = _setting(columns, "columns", "{'shop.customers': {'hash': ['email']}}")
        filters = _setting(row_filters, "row_filters", "{'shop.orders': \"status = 'paid'\"}")
        for entry, text in filters.items():
            if not isinstance(text, str) or not text.strip():
                raise ConfigurationError(f"row_filters[{entry!r}] must be a predicate such as \"status = 'paid' AND "
                                         f"amount > 10\", got {text!r}.")
            parse_row_filter(text, str(entry))  # one that cannot be read is refused when the DAG is parsed
        return cls(tuple((parse_entry(str(entry)), parse_rule(rule, str(entry))) for entry, rule in rules.items()),
                   tuple((parse_entry(str(entry)), text.strip()) for entry, text in filters.items()), routes)

    def check_route_groups(self, tables: list[TableEntry]) -> None:
        """Every shard of a route must be planned by one plan task, which sees them all to check their
        keys and choose their types: each entry of ``tables`` is a task of its own, so a route whose
        entry matches tables of two ``tables`` entries is refused (as far as the entries tell: a name
        it matches, or a pattern it repeats)."""
        for route_entry, route in self.routes:
            covering = [entry_text(e) for e in tables if _overlap(route_entry, e)]
            if len(covering) > 1:
                raise ConfigurationError(
                    f"route[{entry_text(route_entry)!r}] sends tables of {len(covering)} entries of tables "
                    f"({', '.join(covering)}) into {route.database}.{route.table}; each entry is planned by a task of "
                    "its own, which could not check the shards' keys and types together. Name the shards with one "
                    f"entry of tables, e.g. the route's own pattern {entry_text(route_entry)!r}.")

    def for_table(self, table_id: TableId) -> tuple[TableRule | None, TableEntry | None]:
        """The table's rule (its columns' and its rows') and the entry its column rule comes from: a
        name before any pattern (None: no rule)."""
        rule, entry = _first(self.entries, table_id)
        where, _ = _first(self.filters, table_id)
        if where is not None:
            rule = replace(rule or TableRule(), where=where)
        route, _ = _first(self.routes, table_id)
        if route is not None:
            rule = replace(rule or TableRule(), route=route)
        return rule, entry

    def captured(self, schema: TableSchema, chunk_key: str) -> TableSchema:
        """``schema`` as the pipeline captures it (``captured_schema``), by the table's rule; a column the
        rule of a named table names must exist (a pattern's rule may name columns some tables lack), and
        the row filter must read columns the pipeline captures, each compared with values of its type."""
        rule, entry = self.for_table(schema.table_id)
        if rule is None:
            return schema
        if isinstance(entry, TableId):
            missing = [n for n in rule.named if n not in {c.name.lower() for c in schema.columns}]
            if missing:
                raise ConfigurationError(
                    f"columns[{entry_text(entry)!r}] names column(s) {', '.join(sorted(set(missing)))} that "
                    f"{schema.table_id} does not have; its columns are: {', '.join(schema.column_names)}.")
        captured = captured_schema(schema, rule, chunk_key=chunk_key, strict=True)
        if rule.where is not None:
            check_row_filter(rule.where, captured)
        return captured


def captured_schema(schema: TableSchema, rule: TableRule | None, *, chunk_key: str | None = None,
                    strict: bool = False) -> TableSchema:
    """The columns ``rule`` keeps, each marked with its mask. ``strict`` (a plan): a rule that leaves out
    or masks a key column or ``chunk_key``, or truncates a column that is neither text nor bytes, is
    refused with the fix; otherwise (a stream after a DDL) such a key column is kept as it is, and such
    a truncated column is NULL."""
    if rule is None:
        return schema
    keys = set(schema.key_columns) | ({chunk_key} if chunk_key else set())
    touched = sorted(k for k in keys if k.lower() in rule.exclude or rule.mask_of(k))  # include: the key implied
    if touched and strict:
        raise ConfigurationError(
            f"The column rule of {schema.table_id} ({rule}) leaves out or masks key column(s) {', '.join(touched)}: "
            "the key identifies each row in the sink and orders its chunks, so it is captured as it is. Take it "
            "out of the rule (or choose another chunk key with chunk_key_columns).")
    columns = tuple(column if column.name in keys else _masked(schema, column, rule.mask_of(column.name), strict)
                    for column in schema.columns if column.name in keys or rule.keeps(column.name))
    marked = TableSchema(schema.table_id, columns, schema.primary_key, schema.unique_not_null_keys, rule)
    return marked.keeping({c.name for c in columns})


def _masked(schema: TableSchema, column: Column, mask: str | None, strict: bool) -> Column:
    if mask is not None and mask.startswith("truncate") and column.data_type not in _TRUNCATABLE:
        if strict:
            raise ConfigurationError(
                f"The column rule of {schema.table_id} truncates {column.name}, a {column.column_type} column: "
                "truncate cuts text and bytes only; use hash or null to mask it.")
        mask = "null"  # a DDL made it another type: its values are still not to be seen
    return column if mask == column.mask else replace(column, mask=mask)
