"""Every type a chunk key may have orders in Python as the server orders it, and a table keyed by it
goes through planning, the snapshot and the stream.

The types are the server's (``information_schema.COLUMNS`` of a table with one column of each, less
the ones preflight refuses as chunk keys); the values are each type's edges and random values, also
ones the server takes only under a permissive ``sql_mode`` (clipped numbers; zero, partial and
impossible dates, which sit between real ones in the server's order). For each type: the server's ``ORDER BY``
equals the order of the sort keys the split reader and the binlog filter use
(records/ordering.py) and of their text in the sink's ``_cdc_chunk``; and a table with such a
primary key, cut into small splits, is snapshotted, then updated, deleted from and inserted into
while streaming, into a sink equal to the source. Types refused as chunk keys are refused by preflight, naming the type.
"""

from __future__ import annotations

import random
import uuid as uuid_module
from dataclasses import dataclass

import pytest

from airflow_provider_mysqlcdc.cdc.errors import PreflightError
from airflow_provider_mysqlcdc.cdc.model.schema import UNSUPPORTED_CHUNK_KEY_TYPES, TableId
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering, encode_sort_key
from airflow_provider_mysqlcdc.cdc.records.values import ValueNormalizer
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.snapshot import snapshot_tables
from devtools.verify import source_rows

from .helpers import assert_same_rows, delta_rows, run_stream

pytestmark = pytest.mark.integration

RNG = random.Random(27)


def _uuids() -> list[str]:
    """Every version and variant nibble, nil and max, time-based ones from one clock, random ones."""
    values = ["00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"]
    for version in range(16):
        for variant in range(16):
            values.append(f"{RNG.getrandbits(32):08x}-{RNG.getrandbits(16):04x}-{version:x}{RNG.getrandbits(12):03x}-"
                          f"{variant:x}{RNG.getrandbits(12):03x}-{RNG.getrandbits(48):012x}")
    return values + [str(uuid_module.uuid1()) for _ in range(10)] + [str(uuid_module.uuid4()) for _ in range(10)]


def _ints(low: int, high: int) -> list:
    return [low, low + 1, -1, 0, 1, high - 1, high] + [RNG.randint(low, high) for _ in range(20)]


#: chunk-key types (as MariaDB writes them) and values for each; checked below to cover every type
#: the server has that preflight takes as a chunk key
KEY_TYPES: dict[str, tuple[str, list]] = {
    "tinyint": ("TINYINT", _ints(-128, 127)),
    "tinyint_u": ("TINYINT UNSIGNED", _ints(0, 255)),
    "smallint": ("SMALLINT", _ints(-32768, 32767)),
    "mediumint": ("MEDIUMINT", _ints(-8388608, 8388607)),
    "int": ("INT", _ints(-2**31, 2**31 - 1)),
    "int_u": ("INT UNSIGNED", _ints(0, 2**32 - 1)),
    "bigint": ("BIGINT", _ints(-2**63, 2**63 - 1)),
    "bigint_u": ("BIGINT UNSIGNED", _ints(0, 2**64 - 1)),
    "decimal": ("DECIMAL(65,30)", ["-99999999999999999999999999999999999.999999999999999999999999999999", "-0.000000000000000000000000000001",
                                   "0", "0.5", "1e-30", "12345678901234567890.123"] + [f"{RNG.uniform(-1e9, 1e9):.9f}" for _ in range(20)]),
    "float": ("FLOAT", [-3.4e38, -1.0, -1e-30, 0.0, 1e-30, 0.5, 3.4e38] + [RNG.uniform(-1e6, 1e6) for _ in range(20)]),
    "double": ("DOUBLE", [-1.7e308, -2.2e-308, 0.0, 5e-324, 1.7e308] + [RNG.uniform(-1e300, 1e300) for _ in range(20)]),
    "bit": ("BIT(64)", _ints(0, 2**64 - 1)),
    "date": ("DATE", ["0001-01-01", "1000-01-01", "2024-02-29", "9999-12-31", "0000-00-00", "0000-05-06", "2024-00-10",
                      "2024-05-00", "2024-02-30", "2023-12-31", "2024-01-01"]
             + [f"{RNG.randint(1, 9999):04d}-{RNG.randint(1, 12):02d}-{RNG.randint(1, 28):02d}" for _ in range(20)]),
    "datetime": ("DATETIME(6)", ["0001-01-01 00:00:00", "1000-01-01 00:00:00", "2024-02-29 23:59:59.999999",
                                 "9999-12-31 23:59:59.999999", "0000-00-00 00:00:00", "2024-00-10 12:00:00.5",
                                 "2024-05-00 01:02:03.000004", "0000-05-06 00:00:00", "2024-02-30 10:00:00",
                                 "2023-12-31 23:59:59.999999", "2024-01-01 00:00:00"] + [f"2020-01-{d:02d} 10:00:00.{RNG.randint(0, 999999):06d}"
                                                                  for d in range(1, 20)]),
    "timestamp": ("TIMESTAMP(6)", ["1970-01-01 00:00:01", "2038-01-19 03:14:07.999999", "2024-06-01 12:00:00.5",
                                   "0000-00-00 00:00:00"]
                  + [f"{RNG.randint(1971, 2037)}-06-01 12:00:00.{RNG.randint(0, 999999):06d}" for _ in range(20)]),
    "time": ("TIME(6)", ["-838:59:59", "-00:00:00.000001", "00:00:00", "24:00:00", "838:59:59"]
             + [f"{RNG.randint(-838, 838)}:00:00.{RNG.randint(0, 999999):06d}" for _ in range(20)]),
    "year": ("YEAR", [0, 1901, 1970, 2000, 2155] + [RNG.randint(1901, 2155) for _ in range(20)]),
    "char": ("CHAR(10) COLLATE utf8mb4_general_ci", ["", "a", "A ", "B", "é", "e", "ß", "ss", "😀", "z z"]),
    "varchar": ("VARCHAR(20) COLLATE utf8mb4_unicode_520_nopad_ci", ["", " ", "a", "a ", "Ä", "b", "😀", "\t"]),
    "varchar_latin1": ("VARCHAR(20) CHARACTER SET latin1", ["", "a", "Z", "ä", "ÿ", "€"]),
    "binary": ("BINARY(4)", [b"", b"\x00\x01", b"\xff\xff\xff\xff", b"a"] + [RNG.randbytes(RNG.randint(1, 4)) for _ in range(20)]),
    "varbinary": ("VARBINARY(8)", [b"", b"\x00", b"\x00\x00", b"\x01", b"\xff", b"\xff\x00"]),
    "uuid": ("UUID", _uuids()),
    "inet6": ("INET6", ["::", "::1", "::ffff:1.2.3.4", "1.2.3.4", "fe80::1", "2001:db8::ff00:42:8329",
                        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"] + [f"2001:db8::{RNG.getrandbits(16):x}" for _ in range(20)]),
    "inet4": ("INET4", ["0.0.0.0", "0.0.0.1", "9.255.255.255", "10.0.0.0", "127.0.0.1", "255.255.255.255"]
              + [f"{RNG.randint(0, 255)}.{RNG.randint(0, 255)}.0.1" for _ in range(20)]),
}


@dataclass
class KeyTables:
    database: str
    tables: dict[str, TableId]
    lake: str


@pytest.fixture(scope="module")
def key_tables(mysql_server, cdc_user, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("key-types")
    database = f"cdc_keys_{uuid_module.uuid4().hex[:8]}"
    conn = mysql_server.connect()
    tables = {}
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute("SET sql_mode = 'ALLOW_INVALID_DATES'")  # zero and impossible dates, clipped values: legacy servers
        for name, (sql_type, values) in KEY_TYPES.items():
            table = TableId(database, f"k_{name}")
            cur.execute(f"CREATE TABLE {table.quoted} (k {sql_type} NOT NULL PRIMARY KEY, v INT)")
            for number, value in enumerate(values):
                cur.execute(f"INSERT IGNORE INTO {table.quoted} VALUES (%s, %s)", (value, number))
            tables[name] = table
    state, lake = PipelineState(str(tmp / "state")), str(tmp / "lake")
    snapshot_tables(cdc_user, list(tables.values()), lake, state, split_rows=4, chunk_key="k")
    with conn.cursor() as cur:  # the stream: updates of every row, deletes and inserts
        cur.execute("SET sql_mode = 'ALLOW_INVALID_DATES'")
        for table in tables.values():
            cur.execute(f"UPDATE {table.quoted} SET v = v + 100")
            cur.execute(f"SELECT k FROM {table.quoted} ORDER BY k LIMIT 1")
            (smallest,) = cur.fetchone()  # a zero date, where the type has them
            cur.execute(f"DELETE FROM {table.quoted} ORDER BY k LIMIT 2")
            cur.execute(f"INSERT INTO {table.quoted} VALUES (%s, -1)", (smallest,))
    run_stream(cdc_user, tmp, StreamJob(state=state.location, sink=SinkSpec(lake)))
    yield KeyTables(database, tables, lake)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{database}`")


def test_the_key_types_cover_every_type_in_the_servers_catalogue(mysql_server, key_tables):
    """Every column type of every table on the server (its own schemas use most types) is tested
    here as a chunk key, or refused as one by preflight."""
    with mysql_server.connect().cursor() as cur:
        cur.execute("SELECT DISTINCT LOWER(DATA_TYPE) FROM information_schema.COLUMNS")
        server_types = {row[0] for row in cur.fetchall()}
    ours = {load_table_schema(mysql_server.connect(), t).column("k").data_type for t in key_tables.tables.values()}
    assert len(server_types) >= 15
    assert server_types <= ours | UNSUPPORTED_CHUNK_KEY_TYPES, server_types - ours - UNSUPPORTED_CHUNK_KEY_TYPES


@pytest.mark.parametrize("name", sorted(KEY_TYPES))
def test_python_orders_the_keys_as_the_server_does(mysql_server, cdc_user, key_tables, name):
    table = key_tables.tables[name]
    conn = mysql_server.connect()
    schema = load_table_schema(conn, table)
    normalizer = ValueNormalizer(schema)
    with conn.cursor() as cur:
        cur.execute(f"SELECT k, v FROM {table.quoted} ORDER BY k")
        server_order = [normalizer.row_from_tuple(("k", "v"), row)["k"] for row in cur.fetchall()]
    assert len(server_order) >= 4
    ordering = KeyOrdering(schema.column("k"), cdc_user.connect)
    try:
        keys = ordering.sort_keys(server_order)
    finally:
        ordering.close()
    assert all(a < b for a, b in zip(keys, keys[1:])), f"{name}: sort keys out of the server's order"
    texts = [encode_sort_key(k) for k in keys]
    assert all(a < b for a, b in zip(texts, texts[1:])), f"{name}: _cdc_chunk text out of the server's order"


@pytest.mark.parametrize("name", sorted(KEY_TYPES))
def test_a_table_keyed_by_each_type_is_snapshotted_and_streamed_exactly(mysql_server, key_tables, name):
    table = key_tables.tables[name]
    schema = load_table_schema(mysql_server.connect(), table)
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(key_tables.lake, schema))


@pytest.mark.parametrize("sql_type", ["ENUM('a','b')", "SET('a','b')", "JSON", "BLOB", "TEXT"])
def test_a_type_that_cannot_be_a_chunk_key_is_refused_naming_it(mysql_server, key_tables, sql_type):
    table = TableId(key_tables.database, f"refused_{sql_type.split('(')[0].lower()}")
    conn = mysql_server.connect()
    key = "k(10)" if sql_type in ("JSON", "BLOB", "TEXT") else "k"
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (k {sql_type} NOT NULL, PRIMARY KEY ({key}))")
    schema = load_table_schema(conn, table)
    assert schema.column("k").data_type in UNSUPPORTED_CHUNK_KEY_TYPES
    with pytest.raises(PreflightError, match=f"type {schema.column('k').data_type.upper()}, which cannot be a chunk key"):
        schema.chunk_key_column("k")
