"""Table identities and schemas as read from ``information_schema`` (the schema itself: ``cdc/model/schema.py``)."""

from __future__ import annotations

import re
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.cdc.errors import PreflightError
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema, parse_labels

_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
#: a BIT column's literal DEFAULT as both servers show it (``b'101000010'``)
_BIT_LITERAL = re.compile(r"^b'[01]*'$")


def _constant_default(default: str | None, extra: str | None) -> bool:
    """A literal DEFAULT as information_schema shows it: MariaDB quotes string literals and shows
    expressions as such (``current_timestamp()``); MySQL marks expressions ``DEFAULT_GENERATED``
    and does not quote strings, so only its numbers count (anything else is not trusted)."""
    if default in (None, "NULL") or "GENERATED" in (extra or "").upper():
        return False
    return default.startswith("'") or bool(_NUMBER.match(default) or _BIT_LITERAL.match(default))


def table_exists(conn: pymysql.connections.Connection, table_id: TableId) -> bool:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (table_id.database, table_id.table),
        )
        row = cur.fetchone()
    return row is not None and row[0] == "BASE TABLE"


def base_tables(conn: pymysql.connections.Connection) -> list[TableId]:
    """Every base table the connection's user can see (views and system views left out)."""
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE'")
        return [TableId(str(database), str(table)) for database, table in cur.fetchall()]


def missing_table_error(table_id: TableId) -> PreflightError:
    return PreflightError(
        f"Table {table_id} does not exist on the source (or is a view, or the CDC user cannot see it): "
        "check the name, and GRANT SELECT on it to the CDC user."
    )


def load_table_schema(conn: pymysql.connections.Connection, table_id: TableId) -> TableSchema:
    """Read columns and keys of one table; a clear error when it does not exist."""
    if not table_exists(conn, table_id):
        raise missing_table_error(table_id)
    with conn.cursor() as cur:
        cur.execute(
            """
            SELECT COLUMN_NAME, LOWER(DATA_TYPE), COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, NUMERIC_SCALE,
                   DATETIME_PRECISION, CHARACTER_MAXIMUM_LENGTH, CHARACTER_SET_NAME, COLLATION_NAME,
                   COLUMN_DEFAULT, EXTRA
            FROM information_schema.COLUMNS
            WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s
            ORDER BY ORDINAL_POSITION
            """,
            (table_id.database, table_id.table),
        )
        columns = tuple(
            Column(
                name=r[0],
                data_type=r[1],
                column_type=r[2],
                nullable=r[3] == "YES",
                numeric_precision=_int_or_none(r[4]),
                numeric_scale=_int_or_none(r[5]),
                datetime_precision=_int_or_none(r[6]),
                char_max_length=_int_or_none(r[7]),
                charset=r[8],
                collation=r[9],
                unsigned="unsigned" in r[2].lower(),
                labels=parse_labels(r[2]) if r[1] in ("enum", "set") else (),
                # MariaDB reports DEFAULT NULL as the text 'NULL', MySQL as SQL NULL
                fills_existing_rows=r[3] != "YES" or r[10] not in (None, "NULL") or "GENERATED" in (r[11] or "").upper(),
                default_constant=_constant_default(r[10], r[11]),
            )
            for r in cur.fetchall()
        )
        cur.execute(
            """
            SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
            WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0
            ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX
            """,
            (table_id.database, table_id.table),
        )
        unique_indexes: dict[str, list[str]] = {}
        for index_name, column_name in cur.fetchall():
            unique_indexes.setdefault(index_name, []).append(column_name)
    nullable = {c.name for c in columns if c.nullable}
    primary_key = tuple(unique_indexes.pop("PRIMARY", ()))
    unique_not_null = tuple(
        tuple(cols) for cols in unique_indexes.values() if not any(c in nullable for c in cols)
    )
    return TableSchema(table_id, columns, primary_key, unique_not_null)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
