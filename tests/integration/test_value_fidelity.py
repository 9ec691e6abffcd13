"""Every MySQL type decodes to the same Python value through the SELECT and through the binlog, with
each of the row decoders (binlog/row_decoder.py: compiled, pure Python, and the library's own)."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from dataclasses import replace

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import DECODERS
from airflow_provider_mysqlcdc.cdc.binlog.table_map import schema_as_of
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation
from airflow_provider_mysqlcdc.cdc.model.rules import TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.source.rules import captured_schema
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset

pytestmark = pytest.mark.integration

COLUMNS = {
    "ti": "TINYINT", "tiu": "TINYINT UNSIGNED", "si": "SMALLINT", "siu": "SMALLINT UNSIGNED",
    "mi": "MEDIUMINT", "miu": "MEDIUMINT UNSIGNED", "i": "INT", "iu": "INT UNSIGNED",
    "bi": "BIGINT", "biu": "BIGINT UNSIGNED", "dec_max": "DECIMAL(65,30)", "dec0": "DECIMAL(10,0)",
    "f": "FLOAT", "d": "DOUBLE", "b1": "BIT(1)", "b64": "BIT(64)", "bo": "BOOLEAN",
    "da": "DATE", "tm": "TIME", "tm6": "TIME(6)", "dt0": "DATETIME", "dt6": "DATETIME(6)",
    "ts0": "TIMESTAMP NULL", "ts6": "TIMESTAMP(6) NULL", "y": "YEAR",
    "ch": "CHAR(10)", "vc": "VARCHAR(100)", "tt": "TINYTEXT", "tx": "TEXT", "mt": "MEDIUMTEXT", "lt": "LONGTEXT",
    "bn": "BINARY(8)", "vb": "VARBINARY(20)", "tb": "TINYBLOB", "bl": "BLOB", "mb": "MEDIUMBLOB", "lb": "LONGBLOB",
    "en": "ENUM('a','b c','x''y','ünï')", "st": "SET('p','q','r','ß')", "js": "JSON",
    "ge": "GEOMETRY", "pt": "POINT",
}

MAX_ROW = {
    "ti": 127, "tiu": 255, "si": 32767, "siu": 65535, "mi": 8388607, "miu": 16777215, "i": 2147483647,
    "iu": 4294967295, "bi": 2**63 - 1, "biu": 2**64 - 1,
    "dec_max": decimal.Decimal("99999999999999999999999999999999999.999999999999999999999999999999"),
    "dec0": decimal.Decimal("9999999999"), "f": 3.4028234663852886e38, "d": 1.7976931348623157e308,
    "b1": 1, "b64": 2**64 - 1, "bo": 1, "da": dt.date(9999, 12, 31), "tm": dt.timedelta(hours=838, minutes=59, seconds=59),
    "tm6": dt.timedelta(hours=838, minutes=59, seconds=58, microseconds=999999),
    "dt0": dt.datetime(9999, 12, 31, 23, 59, 59), "dt6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    "ts0": dt.datetime(2038, 1, 19, 3, 14, 7), "ts6": dt.datetime(2038, 1, 19, 3, 14, 6, 999999), "y": 2155,
    "ch": "ÿ😀abcdefgh", "vc": "😀" * 100, "tt": "t" * 255, "tx": "héllo 😀 wörld", "mt": "m" * 70000,
    "lt": "l😀" * 1000, "bn": b"\xff" * 8, "vb": b"\xff" * 20, "tb": b"\x00\xff" * 10, "bl": bytes(range(256)),
    "mb": b"\x01" * 70000, "lb": b"\x00" * 3, "en": "ünï", "st": "p,q,r,ß", "js": '{"k": [1, 2.5, "😀", null, true]}',
    "ge": "POLYGON((0 0,1 0,1 1,0 0))", "pt": "POINT(1.5 -2.25)",
}

MIN_ROW = {
    "ti": -128, "tiu": 0, "si": -32768, "siu": 0, "mi": -8388608, "miu": 0, "i": -2147483648, "iu": 0,
    "bi": -(2**63), "biu": 0,
    "dec_max": decimal.Decimal("-99999999999999999999999999999999999.999999999999999999999999999999"),
    "dec0": decimal.Decimal("-9999999999"), "f": -1.175494351e-38, "d": -2.2250738585072014e-308, "b1": 0,
    "b64": 0, "bo": 0, "da": dt.date(1000, 1, 1), "tm": dt.timedelta(hours=-838, minutes=-59, seconds=-59),
    "tm6": -dt.timedelta(hours=838, minutes=59, seconds=58, microseconds=999999), "dt0": dt.datetime(1000, 1, 1),
    "dt6": dt.datetime(1000, 1, 1, 0, 0, 0, 1), "ts0": dt.datetime(1970, 1, 1, 0, 0, 1),
    "ts6": dt.datetime(1970, 1, 1, 0, 0, 1, 1), "y": 1901, "ch": "", "vc": "", "tt": "", "tx": "", "mt": "", "lt": "",
    "bn": b"", "vb": b"", "tb": b"", "bl": b"", "mb": b"", "lb": b"", "en": "a", "st": "", "js": "[]",
    "ge": "POINT(0 0)", "pt": "POINT(0 0)",
}

NULL_ROW = {name: None for name in COLUMNS}


@pytest.fixture(params=[d for d in DECODERS if d != "auto"])
def decoder(request) -> str:
    return request.param

GEOMETRY = {"ge", "pt"}


def _insert(cur, table: str, row_id: int, row: dict, time_zone: str = "+00:00") -> None:
    cur.execute("SET time_zone = %s", (time_zone,))
    names = ["id", *row]
    values = ["%s" if n not in GEOMETRY or row[n] is None else "ST_GeomFromText(%s)" for n in row]
    cur.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES (%s, {', '.join(values)})", [row_id, *row.values()])
    cur.execute("SET time_zone = '+00:00'")


def _random_rows(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        row = dict(MAX_ROW)
        row.update(
            f=rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-20, 20), d=rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300),
            dec_max=decimal.Decimal(rng.randint(-10**64, 10**64)).scaleb(-30), biu=rng.randint(0, 2**64 - 1),
            b64=rng.randint(0, 2**64 - 1), dt6=dt.datetime(2024, 5, 6, 7, 8, 9, rng.randint(0, 999999)),
            tx="".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0x80, 0xD7FF), rng.randint(0x10000, 0x1F9FF)]))
                       for _ in range(rng.randint(0, 40))),
            vb=rng.randbytes(rng.randint(0, 20)), bn=rng.randbytes(rng.randint(0, 8)),
            st=",".join(rng.sample(["p", "q", "r", "ß"], rng.randint(0, 4))),
        )
        rows.append(row)
    return rows


def test_every_type_decodes_identically_through_select_and_binlog(mysql_server, cdc_user, database, decoder):
    table = TableId(database, "all types")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cols = ", ".join(f"`{n}` {t}" for n, t in COLUMNS.items())
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, {cols})")
        start = current_offset(conn)
        rows = [MAX_ROW, MIN_ROW, NULL_ROW, *_random_rows(random.Random(5), 40)]
        for i, row in enumerate(rows):
            _insert(cur, table.quoted, i, row)
        # A TIMESTAMP written by a session in another time zone is the same instant in both paths.
        _insert(cur, table.quoted, 1000, {"ts6": dt.datetime(2024, 1, 1, 10, 0, 0, 5)}, time_zone="+05:00")
        inserted_end = current_offset(conn)
        # Updates carry before and after images; swap max and min rows.
        set_list = ", ".join(f"`{n}` = %s" if n not in GEOMETRY else f"`{n}` = ST_GeomFromText(%s)" for n in COLUMNS)
        cur.execute(f"UPDATE {table.quoted} SET {set_list} WHERE id = 0", list(MIN_ROW.values()))
        cur.execute(f"UPDATE {table.quoted} SET {set_list} WHERE id = 1", list(MAX_ROW.values()))
        end = current_offset(conn)

    schema = load_table_schema(conn, table)
    whole_table = SnapshotSplit(table, 0, "id")
    reader = BinlogReader.for_schemas(cdc_user, [schema], start=start, end=end, decoder=decoder)
    records = [r for r in reader if isinstance(r, ChangeRecord)]
    # with no DDL since, each change's schema as of it is the server's, every column of the matrix
    # recognised in its table map (the sink takes the server's columns and types for them)
    assert all(schema_as_of(r.schema, schema) is schema for r in records)
    creates = {r.after["id"]: r.after for r in records if r.op is Operation.CREATE}
    updates = {r.after["id"]: r for r in records if r.op is Operation.UPDATE}
    assert len(creates) == len(rows) + 1 and set(updates) == {0, 1}
    assert all(r.offset <= inserted_end for r in records if r.op is Operation.CREATE)

    with SplitReader(cdc_user, schema) as split_reader:
        selected = {r["id"]: r for r in split_reader.read(whole_table).rows}

    # The updates swapped rows 0 and 1: the binlog's insert images equal the SELECT of the other row.
    _assert_same(selected[1], {**creates[0], "id": 1})
    _assert_same(selected[0], {**creates[1], "id": 0})
    _assert_same(updates[0].before, creates[0])
    _assert_same(updates[0].after, selected[0])
    for row_id in set(creates) - {0, 1}:
        _assert_same(selected[row_id], creates[row_id])

    # Spot checks of the normalised values themselves.
    top = selected[1]
    assert top["biu"] == 2**64 - 1 and top["b64"] == 2**64 - 1 and top["bi"] == 2**63 - 1
    assert top["dec_max"] == MAX_ROW["dec_max"] and top["dec_max"].as_tuple().exponent == -30
    assert top["ts6"] == dt.datetime(2038, 1, 19, 3, 14, 6, 999999, tzinfo=dt.timezone.utc)
    assert top["ch"] == "ÿ😀abcdefgh" and top["vc"] == "😀" * 100
    assert top["bn"] == b"\xff" * 8 and selected[0]["bn"] == b"\x00" * 8
    assert top["f"] == 3.4028234663852886e38 and top["d"] == 1.7976931348623157e308
    assert top["st"] == "p,q,r,ß" and selected[0]["st"] == "" and selected[2]["st"] is None
    assert selected[1000]["ts6"] == dt.datetime(2024, 1, 1, 5, 0, 0, 5, tzinfo=dt.timezone.utc)
    assert all(v is None for k, v in selected[2].items() if k != "id")


def test_every_type_hashes_identically_through_select_and_binlog(mysql_server, cdc_user, database, decoder):
    """The hash mask digests a value's normalised text: values that compare equal but print
    differently (a DECIMAL's scale, a float's digits, a timestamp's zone) would hash differently on
    the two paths. Every column of the matrix hashed, read both ways."""
    table = TableId(database, "hashed types")
    conn = mysql_server.connect()
    rows = [MAX_ROW, MIN_ROW, NULL_ROW, *_random_rows(random.Random(7), 20)]
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, "
                    f"{', '.join(f'`{n}` {t}' for n, t in COLUMNS.items())})")
        start = current_offset(conn)
        for i, row in enumerate(rows):
            _insert(cur, table.quoted, i, row)
        end = current_offset(conn)
    rule = TableRule(hash=tuple(COLUMNS), truncate=())
    schema = captured_schema(load_table_schema(conn, table), rule, chunk_key="id", strict=True)
    source = replace(cdc_user, mask_salt="class-test-salt")
    selected = _same_on_both_paths(source, schema, start, end, decoder, len(rows))
    hashed = [v for row in selected.values() for k, v in row.items() if k != "id"]
    assert all(v is None or (len(v) == 64 and int(v, 16) >= 0) for v in hashed)
    assert sum(v is not None for v in hashed) == len(COLUMNS) * (len(rows) - 1)  # NULL stays NULL


def _same_on_both_paths(source, schema, start, end, decoder: str, count: int) -> dict:
    """The rows ``0..count-1`` inserted between ``start`` and ``end``, as the binlog (with ``decoder``)
    and the SELECT give them, asserted identical; the SELECT's, by id."""
    reader = BinlogReader.for_schemas(source, [schema], start=start, end=end, decoder=decoder)
    records = [r for r in reader if isinstance(r, ChangeRecord)]
    assert all(schema_as_of(r.schema, schema) is schema for r in records)  # masked columns too
    binlog = {r.after["id"]: r.after for r in records}
    with SplitReader(source, schema) as split_reader:
        selected = {r["id"]: r for r in split_reader.read(SnapshotSplit(schema.table_id, 0, "id")).rows}
    assert set(binlog) == set(selected) == set(range(count))
    for row_id in selected:
        _assert_same(selected[row_id], binlog[row_id])
    return selected


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name] and type(a[name]) is type(b[name]), (
            f"column {name!r}: {a[name]!r} ({type(a[name]).__name__}) != {b[name]!r} ({type(b[name]).__name__})"
        )


#: dates MariaDB and MySQL store with sql_mode='' (no NO_ZERO_DATE, NO_ZERO_IN_DATE): zero, and zero parts
ZERO_AND_PARTIAL = [
    {"da": "0000-00-00", "dt0": "0000-00-00 00:00:00", "dt6": "0000-00-00 00:00:00.000000", "ts0": "0000-00-00 00:00:00"},
    {"da": "2024-00-10", "dt0": "2024-00-10 12:00:00", "dt6": "2024-05-00 01:02:03.000004", "ts0": None},
    {"da": "2024-05-00", "dt0": "0000-05-06 00:00:00", "dt6": "2024-00-00 00:00:00.000001", "ts0": None},
    {"da": "2024-05-06", "dt0": "2024-05-06 07:08:09", "dt6": "2024-05-06 07:08:09.000010", "ts0": "2024-05-06 07:08:09"},
]


def test_zero_and_partial_dates_are_the_same_on_both_paths_and_convert_to_arrow(mysql_server, cdc_user, database,
                                                                                  decoder):
    from airflow_provider_mysqlcdc.sinks.arrow_rows import rows_to_data_table

    table = TableId(database, "odd dates")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, da DATE, dt0 DATETIME, dt6 DATETIME(6), "
                    "ts0 TIMESTAMP NULL)")
        start = current_offset(conn)
        for i, row in enumerate(ZERO_AND_PARTIAL):
            cur.execute(f"INSERT INTO {table.quoted} VALUES (%s, %s, %s, %s, %s)", [i, *row.values()])
        end = current_offset(conn)
    schema = load_table_schema(conn, table)
    selected = _same_on_both_paths(cdc_user, schema, start, end, decoder, len(ZERO_AND_PARTIAL))
    assert selected[3]["da"] == dt.date(2024, 5, 6) and selected[3]["dt6"] == dt.datetime(2024, 5, 6, 7, 8, 9, 10)
    assert all(selected[i][c] is None for i in (0, 1, 2) for c in ("da", "dt0", "dt6", "ts0"))  # no calendar date
    assert rows_to_data_table(schema, [selected[i] for i in sorted(selected)]).num_rows == len(ZERO_AND_PARTIAL)


#: the definitions the main matrix leaves out: odd ENUM/SET members, collations and character sets,
#: generated and invisible columns, MariaDB's own types
MORE_COLUMNS = {
    "en": "ENUM('', 'a,b', 'x''y', 'ü')", "st": "SET('', 'a', 'b c', 'ÿ')",
    "cs": "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    "ci": "VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
    "l1": "VARCHAR(20) CHARACTER SET latin1", "bin": "VARCHAR(20) CHARACTER SET binary",
    "n": "INT", "gs": "BIGINT AS (n * 2) STORED", "gv": "VARCHAR(40) AS (CONCAT(ci, '!')) VIRTUAL",
    "inv": "INT INVISIBLE", "u": "UUID", "i6": "INET6", "i4": "INET4", "y": "YEAR",
}
MORE_ROWS = [
    {"en": "", "st": "", "cs": "Ab", "ci": "aB", "l1": "é€", "bin": b"\x00\xff", "n": 1, "inv": 7,
     "u": "123e4567-e89b-12d3-a456-426614174000", "i6": "2001:db8::ff00:42:8329", "i4": "192.168.0.1", "y": 1901},
    {"en": "a,b", "st": "a,b c,ÿ", "cs": "😀", "ci": "ß", "l1": "", "bin": b"", "n": -2**31, "inv": None,
     "u": "00000000-0000-0000-0000-000000000000", "i6": "::ffff:1.2.3.4", "i4": "0.0.0.0", "y": 2155},
    {"en": "ü", "st": ",a", "cs": "x", "ci": "x", "l1": "ÿ", "bin": b"x", "n": 2**31 - 1, "inv": -1,
     "u": "ffffffff-ffff-ffff-ffff-ffffffffffff", "i6": "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
     "i4": "255.255.255.255", "y": 0},
    {"en": "x'y", "st": "b c", "cs": None, "ci": None, "l1": None, "bin": None, "n": None, "inv": 0,
     "u": None, "i6": None, "i4": None, "y": None},
]


def test_odd_members_collations_generated_invisible_and_mariadb_types_agree_on_both_paths(mysql_server, cdc_user,
                                                                                          database, decoder):
    table = TableId(database, "more types")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, "
                    + ", ".join(f"`{n}` {t}" for n, t in MORE_COLUMNS.items()) + ")")
        start = current_offset(conn)
        for i, row in enumerate(MORE_ROWS):
            cur.execute(f"INSERT INTO {table.quoted} (id, {', '.join(row)}) VALUES (%s{', %s' * len(row)})",
                        [i, *row.values()])
        cur.execute(f"UPDATE {table.quoted} SET n = n - 1, ci = CONCAT(ci, 'z') WHERE id = 0")
        end = current_offset(conn)
    schema = load_table_schema(conn, table)
    assert {"gs", "gv", "inv"} <= set(schema.column_names)
    records = [r for r in BinlogReader.for_schemas(cdc_user, [schema], start=start, end=end, decoder=decoder)
               if isinstance(r, ChangeRecord)]
    with SplitReader(cdc_user, schema) as split_reader:
        selected = {r["id"]: r for r in split_reader.read(SnapshotSplit(table, 0, "id")).rows}
    assert all(schema_as_of(r.schema, schema) is schema for r in records)  # collations, MariaDB's types too
    latest = {}
    for record in records:
        latest[record.after["id"]] = record.after
    assert set(latest) == set(selected) == set(range(len(MORE_ROWS)))
    for row_id in selected:
        _assert_same(selected[row_id], latest[row_id])
    assert selected[0]["gs"] == 0 and selected[0]["gv"] == "aBz!" and selected[0]["inv"] == 7
    assert selected[1]["en"] == "a,b" and selected[1]["st"] == "a,b c,ÿ" and selected[1]["cs"] == "😀"
    assert selected[0]["u"] == "123e4567-e89b-12d3-a456-426614174000" and selected[2]["y"] == 0
    assert selected[1]["i6"] == "::ffff:1.2.3.4" and selected[1]["u"] == "00000000-0000-0000-0000-000000000000"
    from airflow_provider_mysqlcdc.sinks.arrow_rows import rows_to_data_table

    assert rows_to_data_table(schema, [latest[i] for i in sorted(latest)]).num_rows == len(MORE_ROWS)
