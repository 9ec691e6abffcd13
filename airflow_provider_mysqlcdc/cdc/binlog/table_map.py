"""Column descriptions from the binlog's own table-map events.

With ``binlog_row_metadata=FULL`` every table-map event carries column names, signedness,
charsets and ENUM/SET labels. Decoding an event with *its* table map, rather than with today's
``information_schema``, is what lets a reader that lags behind an ALTER TABLE decode old events
with the old schema. The result is the same ``Column`` type the SELECT path uses, so both paths
share one normaliser (records/values.py).

``schema_as_of`` gives the table's schema as of a change: the columns its table map names, each
described by the captured schema where that has the same column (name and type), else by the
table map alone; so a change written before a DDL is applied with the columns it was written
under, not with today's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableSchema
from airflow_provider_mysqlcdc.cdc.records.charsets import codec_name, decodable
from airflow_provider_mysqlcdc.cdc.source.rules import captured_schema

_BY_TYPE_CODE = {
    FIELD_TYPE.TINY: "tinyint",
    FIELD_TYPE.SHORT: "smallint",
    FIELD_TYPE.INT24: "mediumint",
    FIELD_TYPE.LONG: "int",
    FIELD_TYPE.LONGLONG: "bigint",
    FIELD_TYPE.FLOAT: "float",
    FIELD_TYPE.DOUBLE: "double",
    FIELD_TYPE.NEWDECIMAL: "decimal",
    FIELD_TYPE.BIT: "bit",
    FIELD_TYPE.TIMESTAMP: "timestamp",
    FIELD_TYPE.TIMESTAMP2: "timestamp",
    FIELD_TYPE.DATE: "date",
    FIELD_TYPE.NEWDATE: "date",
    FIELD_TYPE.TIME: "time",
    FIELD_TYPE.TIME2: "time",
    FIELD_TYPE.DATETIME: "datetime",
    FIELD_TYPE.DATETIME2: "datetime",
    FIELD_TYPE.YEAR: "year",
    FIELD_TYPE.ENUM: "enum",
    FIELD_TYPE.SET: "set",
    FIELD_TYPE.JSON: "json",
    FIELD_TYPE.GEOMETRY: "geometry",
}


#: types a table map shows as BINARY(n) of their storage: only the schema (``known``) tells them apart
STORED_AS_BINARY = {"uuid": 16, "inet6": 16, "inet4": 4}


def labels_in_charset(col: Any) -> None:
    """A table map column's ENUM or SET labels decoded with its charset, in place. The server writes
    them in the column's character set; both framings read them as UTF-8 with ``surrogateescape``
    (dump.py, library_fixes.py), which keeps their bytes for this."""
    charset = col.character_set_name
    codec = codec_name(charset) if charset is not None and decodable(charset) else "utf-8"
    # bytes the charset does not hold would stop the whole reader here, outside any one table's
    # fault handling: they become U+FFFD instead, as the library's decoding had them become ''
    if col.enum_values:
        col.enum_values = [label.encode("utf-8", "surrogateescape").decode(codec, "replace") for label in col.enum_values]
    if col.set_values:
        col.set_values = [label.encode("utf-8", "surrogateescape").decode(codec, "replace") for label in col.set_values]


def column_from_table_map(col: Any, known: Column | None = None) -> Column:
    """Translate a python-mysql-replication column into our ``Column``; ``known``: the same-named
    column of the table's schema, which names MariaDB's UUID and INET types (``STORED_AS_BINARY``)
    where the table map shows a BINARY of the same length."""
    code = col.type
    charset = col.character_set_name
    is_binary = charset in (None, "binary")
    if code in _BY_TYPE_CODE:
        data_type = _BY_TYPE_CODE[code]
    elif code in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
        data_type = "varbinary" if is_binary else "varchar"
    elif code == FIELD_TYPE.STRING:
        data_type = "binary" if is_binary else "char"
    elif code in (FIELD_TYPE.BLOB, FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB):
        data_type = "blob" if is_binary else "longtext"
    else:
        data_type = f"type{code}"
    if (data_type == "binary" and known is not None
            and STORED_AS_BINARY.get(known.data_type) == getattr(col, "max_length", None)):
        data_type = known.data_type
    labels = tuple(col.enum_values or col.set_values or ())
    bits = getattr(col, "bits", None) if code == FIELD_TYPE.BIT else None
    return Column(
        name=col.name,
        data_type=data_type,
        column_type=f"bit({bits})" if bits else data_type,
        nullable=True,
        numeric_precision=getattr(col, "precision", None) if code == FIELD_TYPE.NEWDECIMAL else None,
        numeric_scale=getattr(col, "decimals", None) if code == FIELD_TYPE.NEWDECIMAL else None,
        char_max_length=getattr(col, "max_length", None) if data_type == "binary" else None,
        charset=None if is_binary else charset,
        collation=col.collation_name,
        unsigned=bool(col.unsigned),
        labels=labels,
    )


#: ``information_schema``'s DATA_TYPE of a column as its table map names the type (``column_from_table_map``)
_AS_TABLE_MAP = {"tinytext": "longtext", "text": "longtext", "mediumtext": "longtext",
                 "tinyblob": "blob", "mediumblob": "blob", "longblob": "blob", "integer": "int",
                 "bool": "tinyint", "boolean": "tinyint", "numeric": "decimal", "real": "double",
                 **{t: "geometry" for t in ("point", "linestring", "polygon", "multipoint", "multilinestring",
                                            "multipolygon", "geometrycollection", "geomcollection")}}


def _collation(column: Column) -> str | None:
    """A column's collation, None for bytes (``information_schema`` has none, a table map ``binary``)."""
    return None if column.collation in (None, "binary") else column.collation


def same_column_type(mapped: Column, known: Column) -> bool:
    """Whether a table map's column (``column_from_table_map``) and a schema's column of that name hold
    their values the same way: the same type (as a table map names it), signedness, collation (which
    names the character set), DECIMAL precision and scale, BIT width, ENUM or SET labels."""
    if mapped.data_type != _AS_TABLE_MAP.get(known.data_type, known.data_type):
        return False
    if mapped.unsigned != known.unsigned and mapped.data_type != "year":  # a table map says YEAR is unsigned
        return False
    # an ENUM's labels in a table map begin with '', the value of an invalid one (index 0)
    labels = mapped.labels[1:] if mapped.data_type == "enum" else mapped.labels
    if (_collation(mapped), labels) != (_collation(known), known.labels):
        return False
    if mapped.data_type == "decimal":
        return (mapped.numeric_precision, mapped.numeric_scale) == (known.numeric_precision, known.numeric_scale)
    return mapped.data_type != "bit" or mapped.bit_width == known.bit_width


def _sql_named(mapped: Column) -> Column:
    """A table map's column with its character set as SQL names it (the table map's is the codec the
    decoders use): the first part of its collation's name (``utf8mb4_general_ci``: ``utf8mb4``)."""
    collation = _collation(mapped)
    return mapped if collation is None else dataclasses.replace(mapped, charset=collation.split("_", 1)[0])


def schema_as_of(mapped: TableSchema, known: TableSchema | None) -> TableSchema:
    """The table's schema as of changes decoded under ``mapped`` (a table map's columns and key:
    ``TableDecodings``), for the sink: the columns ``known``'s rule captures (the captured schema the
    reader was given), each as ``known`` describes it where it has the same column
    (``same_column_type``), else as the table map does, masked by the rule; ``known`` itself when the
    two agree on every column and the key."""
    if known is None:
        return mapped
    rule, keys, by_name = known.table_rule, mapped.key_columns, {c.name: c for c in known.columns}
    columns = tuple(by_name[c.name] if c.name in by_name and same_column_type(c, by_name[c.name]) else _sql_named(c)
                    for c in mapped.columns if c.name in by_name or c.name in keys or rule is None or rule.keeps(c.name))
    if keys == known.key_columns and columns == known.columns:
        return known
    names = {c.name for c in columns}
    primary, unique = ((known.primary_key, tuple(k for k in known.unique_not_null_keys if set(k) <= names))
                       if keys == known.key_columns else (keys, ()))
    as_of = TableSchema(known.table_id, columns, primary, unique, rule)
    # the columns only the table map names get the rule's masks (known's have them already)
    return as_of if rule is None else captured_schema(as_of, rule)
