"""Every character set the server has, through the binlog exactly as the SELECT gives it.

The server's own catalogues make the test data: ``SHOW CHARACTER SET`` names the sets, and each
set's repertoire is what the server converts to it and back unchanged (every Basic Multilingual
Plane code point, and a sample of the others, tried by the server); single-byte sets also get every
one of their 256 bytes. Each set's text is written to a table of its own (VARCHAR and TEXT, which
the binlog stores differently, and an ENUM and a SET whose labels are characters of the set beyond
ASCII: the table map holds the labels in the column's charset), and every row decoder, on both
framings, must give what the snapshot's SELECT gives.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import DECODERS
from airflow_provider_mysqlcdc.cdc.binlog.table_map import schema_as_of
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.records.charset_tables import SINGLE_BYTE
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset

from ..tools.charset_tables import single_byte_tables

pytestmark = pytest.mark.integration

CHARS_PER_ROW = 100
LABELS = 4


@dataclass
class Written:
    schemas: list[TableSchema]
    start: BinlogOffset
    end: BinlogOffset
    selected: dict[TableId, dict[int, tuple[str, ...]]]  # id -> (v, tx, e, s) as the SELECT gives them
    repertoire: dict[str, int]  # charset -> characters written


def _repertoire(cur, database: str, charset: str) -> list[str]:
    """The characters the server converts to ``charset`` and back unchanged."""
    cur.execute(f"SELECT cp FROM `{database}`.candidates "
                f"WHERE CAST(CONVERT(CONVERT(c USING `{charset}`) USING utf8mb4) AS BINARY) = CAST(c AS BINARY) "
                "ORDER BY cp")
    return [chr(row[0]) for row in cur.fetchall()]


@pytest.fixture(scope="module")
def written(mysql_server):
    database = f"cdc_charsets_{uuid.uuid4().hex[:8]}"
    conn = mysql_server.connect()
    tables, repertoire = [], {}
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
        cur.execute(f"CREATE TABLE `{database}`.candidates (cp INT PRIMARY KEY, c VARCHAR(1) "
                    "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)")
        # the Basic Multilingual Plane without surrogates, and every 97th code point of planes 1 and 2
        cur.execute(f"INSERT INTO `{database}`.candidates SELECT seq, CONVERT(CHAR(seq USING utf32) USING utf8mb4) "
                    f"FROM `{database}`.seq_128_to_196607 WHERE seq NOT BETWEEN 55296 AND 57343 "
                    "AND (seq < 65536 OR seq % 97 = 0)")
        cur.execute("SHOW CHARACTER SET")
        charsets = sorted(row[0] for row in cur.fetchall() if row[0] != "binary")
        start = current_offset(conn)
        for charset in charsets:
            table = TableId(database, f"t_{charset}")
            chars = _repertoire(cur, database, charset)
            # labels from the set's repertoire, spread over it, unique by their digit under any collation
            labels = [f"{chars[i * len(chars) // LABELS] if chars else ''}{i}" for i in range(LABELS)]
            listed = ", ".join(f"'{label}'" for label in labels)
            cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v VARCHAR({CHARS_PER_ROW}) CHARACTER SET "
                        f"`{charset}`, tx TEXT CHARACTER SET `{charset}`, e ENUM({listed}) CHARACTER SET `{charset}`, "
                        f"s SET({listed}) CHARACTER SET `{charset}`)")
            repertoire[charset] = len(chars)
            rows = ["".join(chars[i:i + CHARS_PER_ROW]) for i in range(0, len(chars), CHARS_PER_ROW)]
            for number, text in enumerate(rows):
                members = ",".join(labels[j] for j in range(LABELS) if (number + 1) >> j & 1)
                cur.execute(f"INSERT INTO {table.quoted} VALUES (%s, %s, %s, %s, %s)",
                            (number, text, text[::-1], labels[number % LABELS], members))
            if charset in SINGLE_BYTE:  # every byte, also those no Unicode character maps to
                for number, first in enumerate(range(0, 256, 64)):
                    raw = bytes(range(first, first + 64)).hex()
                    cur.execute(f"INSERT INTO {table.quoted} (id, v, tx) VALUES (%s, CONVERT(UNHEX(%s) USING `{charset}`), "
                                f"CONVERT(UNHEX(%s) USING `{charset}`))", (10_000 + number, raw, raw))
            cur.execute(f"UPDATE {table.quoted} SET tx = CONCAT(tx, v) WHERE id % 3 = 0")  # before and after images
            tables.append(table)
        end = current_offset(conn)
        selected = {}
        for table in tables:
            cur.execute(f"SELECT id, v, tx, e, s FROM {table.quoted}")
            selected[table] = {row[0]: tuple(row[1:]) for row in cur.fetchall()}
    schemas = [load_table_schema(conn, t) for t in tables]
    yield Written(schemas, start, end, selected, repertoire)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{database}`")


def test_the_shipped_single_byte_tables_are_the_servers_conversions(mysql_server):
    assert single_byte_tables(mysql_server.connect()) == SINGLE_BYTE, (
        "regenerate airflow_provider_mysqlcdc/cdc/records/charset_tables.py: .venv/bin/python -m tests.tools.charset_tables")


def test_every_charset_has_text_beyond_ascii_to_decode(written):
    assert len(written.repertoire) >= 35
    # ascii has none (its 256 bytes are written, the upper half is what the server makes of them)
    few = {charset: count for charset, count in written.repertoire.items() if count < 10 and charset != "ascii"}
    assert not few, few


def test_every_charset_has_enum_and_set_labels_beyond_ascii(written):
    beyond = {table.table for table, rows in written.selected.items()
              if any(not row[2].isascii() or not row[3].isascii() for row in rows.values() if row[2] is not None)}
    assert len(beyond) >= len(written.repertoire) - 1, sorted(beyond)  # ascii's labels are ASCII


@pytest.mark.parametrize(("decoder", "framing"), [(d, "auto") for d in DECODERS if d != "auto"]
                         + [("compiled", "library")])
def test_every_character_set_decodes_from_the_binlog_as_the_select_gives_it(cdc_user, written, decoder, framing):
    latest: dict[TableId, dict[int, tuple[str, ...]]] = {s.table_id: {} for s in written.schemas}
    known = {s.table_id: s for s in written.schemas}
    unrecognised = set()
    for item in BinlogReader.for_schemas(cdc_user, written.schemas, start=written.start, end=written.end,
                                         decoder=decoder, framing=framing):
        if isinstance(item, ChangeRecord):
            if schema_as_of(item.schema, known[item.table_id]) is not known[item.table_id]:
                unrecognised.add(item.table_id.table)  # a column of every charset is the server's as of its changes
            after = item.after
            latest[item.table_id][after["id"]] = (after["v"], after["tx"], after["e"], after["s"])
    wrong = []
    for table, rows in written.selected.items():
        for row_id, expected in rows.items():
            got = latest[table].get(row_id)
            if got != expected:
                pairs = [(e, g) for e, g in zip(expected[0], (got or ("", ""))[0]) if e != g][:3]
                wrong.append(f"{table.table} row {row_id}: " + ", ".join(
                    f"U+{ord(e):04X} read as U+{ord(g):04X}" for e, g in pairs) if pairs
                    else f"{table.table} row {row_id}: {(got or ())[2:]!r} for {expected[2:]!r}")
    assert not wrong, f"{len(wrong)} rows differ:\n" + "\n".join(wrong[:40])
    assert not unrecognised, sorted(unrecognised)
