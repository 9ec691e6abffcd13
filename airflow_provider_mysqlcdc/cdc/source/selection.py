"""Which tables of the source a pipeline captures: names, and patterns resolved against the server.

An entry of ``tables`` (or ``exclude_tables``) is ``database.table``. Each of the two parts is a
name, or a regular expression that must match the whole name (Python's ``re``, as Flink CDC's
``tables`` and Debezium's ``table.include.list`` take them):

- ``shop.orders``, ```odd.db`.`a,b```: names (backticks around names that hold dots, commas or
  regex characters);
- ``shop.order_\\d+``, ``shop_\\d+.orders``, ``crm.*``: patterns. A part is a pattern when it is not
  in backticks and holds one of ``\\ * + ? [ ] ( ) { } | ^`` (``$`` is not one: MariaDB allows it in
  plain names). The first ``.`` outside backticks, brackets and braces and not escaped separates
  the database from the table: write ``\\.`` for a dot inside a pattern. A part that is just ``*``
  means every name.

``TableSelection.resolve`` gives the tables a run captures: the names as given, and every base table
of the server a pattern matches (system schemas never), less those an exclude entry names or
matches. A pattern that matches nothing is an error: it is most often a typo, and a pipeline that
silently captures nothing is worse than one that says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId

#: schemas of the server itself: never captured by a pattern
SYSTEM_DATABASES = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
_PATTERN_CHARACTERS = frozenset("\\*+?[](){}|^")


def _split_top_level(text: str, separator: str, most: int = -1) -> list[str]:
    """``text`` cut at each ``separator`` outside backticks, brackets, braces and parentheses and not
    escaped by a backslash (at most ``most`` cuts; -1: every one)."""
    parts: list[str] = []
    begin, depth, quoted, escaped = 0, 0, False, False
    for i, char in enumerate(text):
        if quoted:
            quoted = char != "`"
        elif escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "`":
            quoted = True
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth = max(0, depth - 1)
        elif char == separator and depth == 0 and len(parts) != most:
            parts.append(text[begin:i])
            begin = i + 1
    return [*parts, text[begin:]]


def _split_entry(text: str) -> tuple[str, str]:
    """``database.table`` at the first separating dot (see the module doc); each part as written."""
    parts = _split_top_level(text, ".", most=1)
    if len(parts) != 2:
        raise ConfigurationError(f"Table entry {text!r} names no database: write 'database.table' (a pattern such "
                                 "as 'shop.order_\\d+'; backticks around names with dots).")
    return parts[0].strip(), parts[1].strip()


def _is_quoted(part: str) -> bool:
    return len(part) >= 2 and part[0] == part[-1] == "`"


def _is_pattern(part: str) -> bool:
    return not _is_quoted(part) and any(c in _PATTERN_CHARACTERS for c in part)


def _compiled(part: str, entry: str) -> re.Pattern[str]:
    if _is_quoted(part):
        return re.compile(re.escape(part[1:-1].replace("``", "`")))
    try:
        return re.compile(".*" if part == "*" else part)
    except re.error as exc:
        raise ConfigurationError(f"Table pattern {entry!r}: {part!r} is not a regular expression ({exc}). Escape "
                                 "a character meant literally with a backslash, or put the name in backticks.") from None


@dataclass(frozen=True)
class TablePattern:
    """A ``database.table`` entry with a pattern in either part (see the module doc)."""

    text: str
    database: re.Pattern[str]
    table: re.Pattern[str]

    def matches(self, table_id: TableId) -> bool:
        return bool(self.database.fullmatch(table_id.database) and self.table.fullmatch(table_id.table))

    def __str__(self) -> str:
        return self.text


TableEntry = TableId | TablePattern


def parse_entry(text: str) -> TableEntry:
    """One entry of ``tables`` or ``exclude_tables``: a name or a pattern."""
    text = text.strip()
    database, table = _split_entry(text)
    if not database or not table:
        raise ConfigurationError(f"Table entry {text!r} has an empty database or table part: write 'database.table'.")
    if _is_pattern(database) or _is_pattern(table):
        return TablePattern(text, _compiled(database, text), _compiled(table, text))
    return TableId.parse(text)


def entry_database(entry: TableEntry) -> str | None:
    """The database an entry names, None when its database part is a pattern."""
    if isinstance(entry, TableId):
        return entry.database
    database, _ = _split_entry(entry.text)
    if _is_pattern(database):
        return None
    return database[1:-1].replace("``", "`") if _is_quoted(database) else database


def entry_text(entry: TableEntry) -> str:
    """The text ``parse_entry`` reads back as ``entry``."""
    return entry.quoted if isinstance(entry, TableId) else entry.text


def split_entries(text: str) -> list[str]:
    """A comma-separated list of entries; commas inside backticks, brackets and braces (``\\d{1,3}``)
    belong to the entry."""
    return [e.strip() for e in _split_top_level(text, ",") if e.strip()]


def parse_entries(value: Any, what: str) -> list[TableEntry]:
    """Entries given as a list or a comma-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        items = split_entries(value)
    elif isinstance(value, (list, tuple)):
        items = [str(v) for v in value if str(v).strip()]
    else:
        raise ConfigurationError(f"Malformed {what} {value!r}: write ['db.table', 'db.pattern_\\d+', ...].")
    return [parse_entry(item) for item in items]


@dataclass(frozen=True)
class TableSelection:
    """The tables a run names: names and patterns, less the excluded (see the module doc)."""

    include: tuple[TableEntry, ...]
    exclude: tuple[TableEntry, ...] = ()

    @classmethod
    def parse(cls, tables: Any, exclude_tables: Any = None) -> "TableSelection":
        return cls(tuple(parse_entries(tables, "tables")), tuple(parse_entries(exclude_tables, "exclude_tables")))

    @property
    def names(self) -> list[TableId]:
        return [e for e in self.include if isinstance(e, TableId)]

    @property
    def patterns(self) -> list[TablePattern]:
        return [e for e in self.include if isinstance(e, TablePattern)]

    def excluded(self, table_id: TableId) -> bool:
        return any(_names(e, table_id) for e in self.exclude)

    def pattern_matches(self, table_id: TableId) -> bool:
        """A pattern of the selection matches ``table_id``, and no exclusion does."""
        return any(p.matches(table_id) for p in self.patterns) and not self.excluded(table_id)

    def covers(self, table_id: TableId) -> bool:
        """The selection names or matches ``table_id`` (whether or not the server has it), and does not exclude it."""
        return any(_names(e, table_id) for e in self.include) and not self.excluded(table_id)

    def resolve(self, server_tables: Iterable[TableId]) -> list[TableId]:
        """The tables this selection captures among the server's base tables ``server_tables``, in the
        order given (a pattern's matches sorted, each table once). Raises for a pattern that matches
        nothing, naming it."""
        candidates = sorted(t for t in set(server_tables) if t.database not in SYSTEM_DATABASES)
        chosen: dict[TableId, None] = {}
        for entry in self.include:
            if isinstance(entry, TableId):
                if not self.excluded(entry):
                    chosen[entry] = None
                continue
            matched = [t for t in candidates if entry.matches(t)]
            if not matched:
                raise ConfigurationError(
                    f"Table pattern '{entry.text}' matches no table on the source{_near(entry, candidates)}. Patterns "
                    "are regular expressions matched against the whole database and table names: check it, or "
                    "leave it out until such a table exists.")
            chosen.update((t, None) for t in matched if not self.excluded(t))
        return list(chosen)


def _names(entry: TableEntry, table_id: TableId) -> bool:
    return entry == table_id if isinstance(entry, TableId) else entry.matches(table_id)


def _near(pattern: TablePattern, candidates: Sequence[TableId]) -> str:
    """The tables of the databases the pattern matches, to help spot a typo."""
    near = [str(t) for t in candidates if pattern.database.fullmatch(t.database)][:10]
    return f" (tables there: {', '.join(near)})" if near else ""
