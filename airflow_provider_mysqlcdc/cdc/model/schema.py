"""A table's identity and schema: its columns, row key and chunk key.

The schema decides three things: how each column's values are normalised (records/values.py),
which columns identify a row (the primary key, else a unique key of NOT NULL columns), and which
column the table is chunked by (a configured column, else the first key column). Reading it from
the server is ``cdc/source/schema.py``'s; this module is plain data every layer shares.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, PreflightError
from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule, route_of, rule_from, rule_to


def quote_identifier(name: str) -> str:
    """Backtick-quote an identifier (reserved words, dashes, unicode and backticks included)."""
    return "`" + name.replace("`", "``") + "`"


#: the sinks name their change and metadata columns (``_cdc_op``, ``_cdc_version``, ...) with this
#: prefix; a source column may not begin with it (compared without case, as Delta and MySQL compare names)
RESERVED_COLUMN_PREFIX = "_cdc_"

#: characters of a name that cannot stand in a path as they are: separators, what URLs (delta-rs reads
#: a path as one) give a meaning to, and the escape character itself
_PATH_UNSAFE = frozenset("/\\@%#?")


def path_segment(name: str) -> str:
    """A database or table name as one path segment, never ``.`` or ``..``, one-to-one: each unsafe
    character becomes ``@`` and its 4-digit hex code point, as MySQL names its own files."""
    if name in (".", ".."):
        return "@002e" * len(name)
    return "".join(f"@{ord(ch):04x}" if ch in _PATH_UNSAFE else ch for ch in name)


def with_params(sql: str) -> str:
    """SQL text (quoted identifiers and all) made safe to be part of a statement executed with
    parameters: the driver %-formats such a statement, so a ``%`` of a name (a table called
    ``pct%s``) must be doubled. Only for text that holds no placeholder of its own."""
    return sql.replace("%", "%%")


@dataclass(frozen=True, order=True)
class TableId:
    database: str
    table: str

    @classmethod
    def parse(cls, text: str, default_database: str | None = None) -> "TableId":
        """``db.table`` or, with a default database, ``table``. Backticks allow dots in names."""
        text = text.strip()
        tokens = re.findall(r"`((?:[^`]|``)+)`|([^.`]+)", text)
        parts = [quoted.replace("``", "`") if quoted else bare for quoted, bare in tokens]
        if len(parts) == 2:
            return cls(parts[0], parts[1])
        if len(parts) == 1 and default_database:
            return cls(default_database, parts[0])
        raise ConfigurationError(
            f"Malformed table name {text!r}: write it as 'database.table' (backticks around names with dots)."
        )

    @classmethod
    def parse_list(cls, text: str) -> list["TableId"]:
        """``db.a, `odd,name`.b``: comma-separated ``parse`` items (commas inside backticks are names')."""
        items = re.findall(r"(?:`(?:[^`]|``)*`|[^,`])+", text)
        return [cls.parse(item) for item in items if item.strip()]

    @property
    def path_segments(self) -> tuple[str, str]:
        """The database and table names as two path segments (the sink's tables, staged rows)."""
        return path_segment(self.database), path_segment(self.table)

    @property
    def quoted(self) -> str:
        """The names backtick-quoted: the text ``parse`` reads back exactly, whatever the names hold."""
        return f"{quote_identifier(self.database)}.{quote_identifier(self.table)}"

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"


#: Types that cannot be a chunk key: SQL compares ENUM/SET with strings by label but orders them by
#: index, and the others have no usable order or cannot be indexed whole.
UNSUPPORTED_CHUNK_KEY_TYPES = frozenset(
    {"enum", "set", "json", "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
     "multipolygon", "geometrycollection", "tinyblob", "blob", "mediumblob", "longblob", "tinytext", "text",
     "mediumtext", "longtext"}
)

_ENUM_VALUES = re.compile(r"'((?:[^']|'')*)'")


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str  # information_schema DATA_TYPE, lower case: 'int', 'varchar', 'enum', ...
    column_type: str  # full COLUMN_TYPE: 'int(10) unsigned', "enum('a','b')", ...
    nullable: bool
    numeric_precision: int | None = None
    numeric_scale: int | None = None
    datetime_precision: int | None = None
    char_max_length: int | None = None
    charset: str | None = None
    collation: str | None = None
    unsigned: bool = False
    #: labels of an ENUM or SET column, in definition order
    labels: tuple[str, ...] = ()
    #: rows that existed when the column was added hold a value other than NULL in it: the column
    #: has a DEFAULT, is NOT NULL (an implicit default), or is generated
    fills_existing_rows: bool = False
    #: the column's DEFAULT is a constant (a literal, not an expression such as CURRENT_TIMESTAMP, and
    #: the column is not generated): every row that existed when it was added holds that value
    default_constant: bool = False
    #: what the pipeline's column rule does to this column's values (cdc/model/rules.py): ``hash``,
    #: ``truncate:<n>``, ``null``, or None for values as they are
    mask: str | None = None

    @property
    def bit_width(self) -> int:
        """A BIT column's width: the digits of its ``column_type`` (``bit(8)``), 64 when it names none."""
        digits = "".join(ch for ch in self.column_type if ch.isdigit())
        return int(digits) if digits else 64

    @property
    def is_text(self) -> bool:
        """Character data (compared under a collation), as opposed to bytes or numbers."""
        return self.data_type in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")


@dataclass(frozen=True)
class TableSchema:
    table_id: TableId
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    unique_not_null_keys: tuple[tuple[str, ...], ...] = ()
    #: the rule that chose and masked these columns (cdc/source/rules.py); None: every column as it is
    table_rule: TableRule | None = None
    _by_name: dict[str, Column] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({c.name: c for c in self.columns})

    def column(self, name: str) -> Column:
        try:
            return self._by_name[name]
        except KeyError:
            raise ConfigurationError(
                f"Table {self.table_id} has no column {name!r}; its columns are: "
                + ", ".join(c.name for c in self.columns)
            ) from None

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def route(self) -> Route | None:
        """The sink table this table is a shard of, by its rule (None: a sink table of its own)."""
        return route_of(self.table_rule)

    def reserved_name_problem(self) -> str | None:
        """Why the sinks cannot take this table's columns as they are named, if they cannot."""
        clashing = [c.name for c in self.columns if c.name.lower().startswith(RESERVED_COLUMN_PREFIX)]
        if not clashing:
            return None
        return (f"Table {self.table_id} has column(s) {', '.join(clashing)} whose names begin with "
                f"{RESERVED_COLUMN_PREFIX!r}, which the sink reserves for its change metadata columns: rename them "
                f"on the source (ALTER TABLE {self.table_id.quoted} RENAME COLUMN {quote_identifier(clashing[0])} "
                "TO ...), or leave the table out of the pipeline.")

    @property
    def key_columns(self) -> tuple[str, ...]:
        """Columns that identify a row: the primary key, else the first unique key of NOT NULL columns."""
        if self.primary_key:
            return self.primary_key
        if self.unique_not_null_keys:
            return self.unique_not_null_keys[0]
        return ()

    def chunk_key_column(self, configured: str | None = None) -> str:
        """The column splits are cut by. It must belong to the row key so a row never sits in two splits."""
        chosen = self._choose_chunk_key(configured)
        data_type = self.column(chosen).data_type
        if data_type in UNSUPPORTED_CHUNK_KEY_TYPES:
            raise PreflightError(
                f"Column {chosen!r} of {self.table_id} has type {data_type.upper()}, which cannot be a chunk key; "
                "configure another column of its primary key as the chunk key column."
            )
        return chosen

    def _choose_chunk_key(self, configured: str | None) -> str:
        keys = self.key_columns
        if configured is not None:
            column = self.column(configured)
            if column.nullable:
                raise PreflightError(
                    f"Chunk key column {configured!r} of {self.table_id} is nullable; choose a NOT NULL "
                    f"column, or make it NOT NULL."
                )
            if keys and configured not in keys:
                raise PreflightError(
                    f"Chunk key column {configured!r} of {self.table_id} is not part of its row key "
                    f"({', '.join(keys)}); an update could move a row between splits. Choose one of: "
                    + ", ".join(keys)
                )
            if not keys:
                raise PreflightError(
                    f"Table {self.table_id} has no primary key and no unique key of NOT NULL columns, so "
                    f"a row cannot be identified in the binlog. Add a primary key (or a UNIQUE key on "
                    f"NOT NULL columns including {configured!r})."
                )
            return configured
        if not keys:
            raise PreflightError(
                f"Table {self.table_id} has no primary key and no unique key of NOT NULL columns: add a "
                "primary key (ALTER TABLE ... ADD PRIMARY KEY (...)), or a UNIQUE key on NOT NULL columns "
                "and configure one of them as its chunk key column."
            )
        return keys[0]

    def keeping(self, names: Collection[str]) -> "TableSchema":
        """Only the columns named (and the key columns), with the unique keys they still hold whole."""
        kept = tuple(c for c in self.columns if c.name in names or c.name in self.key_columns)
        names = {c.name for c in kept}
        return TableSchema(self.table_id, kept, self.primary_key,
                           tuple(k for k in self.unique_not_null_keys if set(k) <= names), self.table_rule)

    def key_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[c] for c in self.key_columns)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table_id.quoted, "columns": [dataclasses.asdict(c) for c in self.columns],
                "primary_key": list(self.primary_key), "unique_not_null_keys": [list(k) for k in self.unique_not_null_keys],
                "table_rule": rule_to(self.table_rule)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TableSchema":
        columns = tuple(Column(**{**c, "labels": tuple(c.get("labels", ()))}) for c in data["columns"])
        return cls(TableId.parse(data["table"]), columns, tuple(data["primary_key"]),
                   tuple(tuple(k) for k in data.get("unique_not_null_keys", ())), rule_from(data.get("table_rule")))


def parse_labels(column_type: str) -> tuple[str, ...]:
    """The labels of ``enum('a','b')`` / ``set('a','b')`` in definition order."""
    body = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return tuple(v.replace("''", "'") for v in _ENUM_VALUES.findall(body))


