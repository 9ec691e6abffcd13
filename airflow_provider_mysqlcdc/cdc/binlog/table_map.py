"""Column descriptions from the binlog's own table-map events.

With ``binlog_row_metadata=FULL`` every table-map event carries column names, signedness,
charsets and ENUM/SET labels. Decoding an event with *its* table map, rather than with today's
``information_schema``, is what lets a reader that lags behind an ALTER TABLE decode old events
with the old schema. The result is the same ``Column`` type the SELECT path uses, so both paths
share one normaliser (records/values.py).
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from airflow_provider_mysqlcdc.cdc.records.charsets import codec_name, decodable
from airflow_provider_mysqlcdc.cdc.source.schema import Column

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
    return Column(
        name=col.name,
        data_type=data_type,
        column_type=data_type,
        nullable=True,
        numeric_scale=getattr(col, "decimals", None) if code == FIELD_TYPE.NEWDECIMAL else None,
        char_max_length=getattr(col, "max_length", None) if data_type == "binary" else None,
        charset=None if is_binary else charset,
        collation=col.collation_name,
        unsigned=bool(col.unsigned),
        labels=labels,
    )
