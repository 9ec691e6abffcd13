"""Split planning on a real server: every key shape, boundaries from the database, full coverage.

For each table the splits must be contiguous, open at both ends, each boundary strictly increasing
in the database's order, and reading every split must return every row exactly once.
"""

from __future__ import annotations

import decimal
import random

import pytest

from airflow_provider_mysqlcdc.cdc.errors import PreflightError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from devtools.verify import source_rows

pytestmark = pytest.mark.integration


def _plan_and_read(source, admin, table: TableId, options: SplitOptions):
    conn = source.connect()
    schema = load_table_schema(conn, table)
    splitter = TableSplitter(conn, schema, options)
    splits = splitter.split()
    boundaries = [s.end for s in splits[:-1]]
    sort_keys = splitter.ordering.sort_keys(boundaries)
    assert splits[0].start is None and splits[-1].end is None
    assert all(a.end == b.start for a, b in zip(splits, splits[1:]))
    assert all(a < b for a, b in zip(sort_keys, sort_keys[1:])), "boundaries not strictly increasing"
    conn.close()
    seen: dict = {}
    with SplitReader(source, schema) as reader:
        for split in splits:
            for row in reader.read(split).rows:
                key = schema.key_of(row)
                assert key not in seen, f"row {key} read by two splits"
                seen[key] = row
    assert seen == source_rows(admin, schema)
    return splits


def _create(admin_conn, table: TableId, ddl: str, rows: list[tuple], columns: str) -> None:
    with admin_conn.cursor() as cur:
        cur.execute(ddl.format(name=table.quoted))
        if rows:
            marks = ", ".join(["%s"] * len(rows[0]))
            cur.executemany(f"INSERT INTO {table.quoted} ({columns}) VALUES ({marks})", rows)


def test_dense_integer_key_is_cut_arithmetically(mysql_server, cdc_user, database):
    table = TableId(database, "dense")
    _create(mysql_server.connect(), table, "CREATE TABLE {name} (id INT PRIMARY KEY, v INT)",
            [(i, i) for i in range(1, 1001)], "id, v")
    splits = _plan_and_read(cdc_user, mysql_server.admin, table, SplitOptions(split_rows=100))
    assert [s.end for s in splits[:-1]] == list(range(101, 1001, 100))


def test_sparse_integer_key_uses_database_boundaries(mysql_server, cdc_user, database):
    table = TableId(database, "sparse")
    rng = random.Random(3)
    keys = sorted(rng.sample(range(-10**12, 10**12), 700))
    _create(mysql_server.connect(), table, "CREATE TABLE {name} (id BIGINT PRIMARY KEY)", [(k,) for k in keys], "id")
    splits = _plan_and_read(cdc_user, mysql_server.admin, table, SplitOptions(split_rows=50))
    assert all(s.end in keys for s in splits[:-1]), "queried boundaries are existing key values"
    assert 10 <= len(splits) <= 16


def test_composite_key_with_long_runs_of_equal_first_column(mysql_server, cdc_user, database):
    table = TableId(database, "composite")
    rows = [(a, b) for a in range(1, 8) for b in range(1, 1 + (300 if a == 3 else 20))]
    _create(mysql_server.connect(), table, "CREATE TABLE {name} (a INT, b INT, PRIMARY KEY (a, b))", rows, "a, b")
    # distribution factor 7/420 < 0.05 -> boundaries from the database; a=3 has 300 rows > chunk size
    splits = _plan_and_read(cdc_user, mysql_server.admin, table, SplitOptions(split_rows=25))
    assert splits[0].chunk_key == "a"


def test_case_insensitive_string_key_with_quoted_names(mysql_server, cdc_user, database):
    table = TableId(database, "sélect-ion")
    rng = random.Random(9)
    values: dict[str, str] = {}
    while len(values) < 600:
        v = "".join(rng.choice("aAbBzZéÉ😀 \t-_") for _ in range(rng.randint(1, 6)))
        folded = v.lower().rstrip(" ").replace("é", "e")  # general_ci: case, accents, trailing spaces
        values.setdefault(folded, v)
    _create(mysql_server.connect(), table,
            "CREATE TABLE {name} (`kéy-1` VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, `order` INT)",
            [], "")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        for i, v in enumerate(values.values()):
            cur.execute(f"INSERT IGNORE INTO {table.quoted} VALUES (%s, %s)", (v, i))
    _plan_and_read(cdc_user, mysql_server.admin, table, SplitOptions(split_rows=40))


def test_decimal_key_even_split(mysql_server, cdc_user, database):
    table = TableId(database, "dec")
    keys = [decimal.Decimal(i) / 4 for i in range(-2000, 2000)]  # step 0.25 -> factor 1/4... within bounds
    _create(mysql_server.connect(), table, "CREATE TABLE {name} (k DECIMAL(30,10) PRIMARY KEY)", [(k,) for k in keys], "k")
    splits = _plan_and_read(cdc_user, mysql_server.admin, table, SplitOptions(split_rows=300))
    assert len(splits) > 5 and all(isinstance(s.end, decimal.Decimal) for s in splits[:-1])


def test_bigint_unsigned_near_maximum(mysql_server, cdc_user, database):
    table = TableId(database, "unsigned")
    top = 2**64 - 1
    _create(mysql_server.connect(), table, "CREATE TABLE {name} (id BIGINT UNSIGNED PRIMARY KEY)",
            [(top - i,) for i in range(1000)], "id")
    splits = _plan_and_read(cdc_user, mysql_server.admin, table, SplitOptions(split_rows=64))
    assert len(splits) == 16 and all(s.end <= top for s in splits[:-1])


@pytest.mark.parametrize("rows", [0, 1])
def test_empty_and_one_row_tables_are_one_open_split(mysql_server, cdc_user, database, rows):
    table = TableId(database, f"tiny{rows}")
    _create(mysql_server.connect(), table, "CREATE TABLE {name} (id INT PRIMARY KEY)", [(7,)][:rows], "id")
    splits = _plan_and_read(cdc_user, mysql_server.admin, table, SplitOptions(split_rows=10))
    assert [(s.start, s.end) for s in splits] == [(None, None)]


def test_unique_not_null_key_serves_when_there_is_no_primary_key(mysql_server, cdc_user, database):
    table = TableId(database, "nopk")
    _create(mysql_server.connect(), table, "CREATE TABLE {name} (code VARCHAR(10) NOT NULL, v INT, UNIQUE KEY (code))",
            [(f"c{i:04}", i) for i in range(300)], "code, v")
    _plan_and_read(cdc_user, mysql_server.admin, table, SplitOptions(split_rows=32, chunk_key_column="code"))


def test_chunk_key_must_be_part_of_the_row_key(mysql_server, cdc_user, database):
    table = TableId(database, "badkey")
    _create(mysql_server.connect(), table, "CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL)", [], "")
    conn = cdc_user.connect()
    with pytest.raises(PreflightError, match="not part of its row key"):
        TableSplitter(conn, load_table_schema(conn, table), SplitOptions(chunk_key_column="v"))


@pytest.mark.parametrize("ids", [range(1, 1001), [1, 2, 3, 5000, 90000], [7]])
def test_a_split_of_an_integer_key_is_cut_into_partitions_by_key_width(mysql_server, cdc_user, database, ids):
    """A chunk job's partitions: ranges of equal width between the split's smallest and largest key
    (no count of its rows), tiling the split exactly, so every row is read once."""
    table = TableId(database, "widths")
    _create(mysql_server.connect(), table, "CREATE TABLE {name} (id BIGINT UNSIGNED PRIMARY KEY)",
            [(i,) for i in ids], "id")
    conn = cdc_user.connect()
    schema = load_table_schema(conn, table)
    [split] = TableSplitter(conn, schema, SplitOptions(split_rows=10**6)).split()
    within = SnapshotSplit(table, split.index, "id", 2, None)  # from key 2 up
    parts = TableSplitter(conn, schema, SplitOptions()).cut_evenly(within, 4)
    assert 1 <= len(parts) <= 4 and parts[0].start == 2 and parts[-1].end is None
    assert all(a.end == b.start for a, b in zip(parts, parts[1:]))
    with SplitReader(cdc_user, schema) as reader:
        read = sorted(row["id"] for part in parts for row in reader.read(part).rows)
    assert read == sorted(i for i in ids if i >= 2)
