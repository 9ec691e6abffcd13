"""The binlog reader on a real server: rotations, end offsets, key changes, DDL, following the head."""

from __future__ import annotations

import threading

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader, TransactionCommitted
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation, SchemaChangeEvent, TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset

pytestmark = pytest.mark.integration


def _table(mysql_server, database, ddl="(id INT PRIMARY KEY, v INT)"):
    table = TableId(database, "t")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} {ddl}")
    return table, conn


def test_reads_across_rotations_and_stops_exactly_at_the_end_offset(mysql_server, cdc_user, database):
    table, conn = _table(mysql_server, database)
    start = current_offset(conn)
    with conn.cursor() as cur:
        for i in range(30):
            cur.execute(f"INSERT INTO {table.quoted} VALUES (%s, %s)", (i, i))
            if i % 10 == 9:
                cur.execute("FLUSH BINARY LOGS")
        end = current_offset(conn)
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1000, 0)")  # after the end: must not be read
    schema = load_table_schema(conn, table)
    items = list(BinlogReader.for_schemas(cdc_user, [schema], start=start, end=end))
    records = [i for i in items if isinstance(i, ChangeRecord)]
    assert [r.after["id"] for r in records] == list(range(30))
    assert len({r.offset.file for r in records}) >= 3, "the reads did not cross rotations"
    assert records == sorted(records, key=lambda r: r.order_key)
    commits = [i for i in items if isinstance(i, TransactionCommitted)]
    assert len(commits) == 30 and commits[-1].offset <= end


def test_key_change_is_a_delete_plus_a_create_at_one_offset(mysql_server, cdc_user, database):
    table, conn = _table(mysql_server, database, "(a INT, b INT, v INT, PRIMARY KEY (a, b))")
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 1, 0), (2, 2, 0)")
        start = current_offset(conn)
        cur.execute(f"UPDATE {table.quoted} SET b = b + 10, v = 5")  # key change for both rows
        cur.execute(f"UPDATE {table.quoted} SET v = 6 WHERE a = 1")  # plain update
        end = current_offset(conn)
    schema = load_table_schema(conn, table)
    records = [i for i in BinlogReader.for_schemas(cdc_user, [schema], start=start, end=end)
               if isinstance(i, ChangeRecord)]
    assert [(r.op, r.row, r.part) for r in records] == [
        (Operation.DELETE, 0, 0), (Operation.CREATE, 0, 1), (Operation.DELETE, 1, 0), (Operation.CREATE, 1, 1),
        (Operation.UPDATE, 0, 0)]
    assert records[0].before == {"a": 1, "b": 1, "v": 0} and records[1].after == {"a": 1, "b": 11, "v": 5}
    assert records[0].offset == records[1].offset
    assert records[4].before["v"] == 5 and records[4].after["v"] == 6


def test_ddl_is_surfaced_and_old_events_decode_with_the_old_schema(mysql_server, cdc_user, database):
    table, conn = _table(mysql_server, database)
    start = current_offset(conn)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 2147483647)")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN note VARCHAR(10) DEFAULT 'x', MODIFY v BIGINT UNSIGNED")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (2, 18446744073709551615, 'y')")
        cur.execute(f"TRUNCATE TABLE {table.quoted}")
        end = current_offset(conn)
    schema = load_table_schema(conn, table)  # today's schema; the reader must not need it for decoding
    items = [i for i in BinlogReader.for_schemas(cdc_user, [schema], start=start, end=end)
             if not isinstance(i, TransactionCommitted)]
    assert isinstance(items[0], ChangeRecord) and items[0].after == {"id": 1, "v": 2147483647}
    assert isinstance(items[1], SchemaChangeEvent) and "ADD COLUMN note" in items[1].statement
    assert items[1].table_ids == (table,)
    assert isinstance(items[2], ChangeRecord) and items[2].after == {"id": 2, "v": 2**64 - 1, "note": "y"}
    assert isinstance(items[3], SchemaChangeEvent) and items[3].statement.upper().startswith("TRUNCATE")
    assert len(items) == 4


def test_a_decimal_scale_change_decodes_each_event_with_its_own_scale(mysql_server, cdc_user, database):
    from decimal import Decimal

    conn = mysql_server.connect(database)
    table = TableId(database, "money")
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, d DECIMAL(10,2))")
    start = current_offset(conn)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 1.25)")
        cur.execute(f"ALTER TABLE {table.quoted} MODIFY d DECIMAL(10,4)")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (2, 1.2345)")
        end = current_offset(conn)
    records = [i for i in BinlogReader.for_schemas(cdc_user, [load_table_schema(conn, table)], start=start, end=end)
               if isinstance(i, ChangeRecord)]
    assert [str(r.after["d"]) for r in records] == ["1.25", "1.2345"]
    assert records[1].after["d"] == Decimal("1.2345")


def test_follow_mode_waits_for_new_events(mysql_server, cdc_user, database):
    table, conn = _table(mysql_server, database)
    schema = load_table_schema(conn, table)
    reader = BinlogReader.for_schemas(cdc_user, [schema], start=current_offset(conn), follow=True)
    received: list[ChangeRecord] = []
    done = threading.Event()

    def consume() -> None:
        for item in reader:
            if isinstance(item, ChangeRecord):
                received.append(item)
                if len(received) == 20:
                    break
        done.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    with conn.cursor() as cur:
        for i in range(20):
            cur.execute(f"INSERT INTO {table.quoted} VALUES (%s, 0)", (i,))
    assert done.wait(30), f"follow mode received only {len(received)} of 20 rows"
    assert [r.after["id"] for r in received] == list(range(20))


def test_one_big_transaction_decoded_in_pieces_gives_the_same_records(mysql_server, cdc_user, database):
    from airflow_provider_mysqlcdc.cdc.binlog.ranges import plan_decode_ranges

    table, conn = _table(mysql_server, database, "(id INT PRIMARY KEY, v INT, pad VARCHAR(200))")
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} SELECT seq, 0, REPEAT('p', 150) FROM `{database}`.seq_1_to_20000")
        start = current_offset(conn)
        cur.execute(f"UPDATE {table.quoted} SET v = v + 1")  # one transaction, many row events
        cur.execute(f"DELETE FROM {table.quoted} WHERE id % 3 = 0")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN w INT")
        cur.execute(f"UPDATE {table.quoted} SET id = id + 100000 WHERE id < 1000")
        end = current_offset(conn)
    schema = load_table_schema(conn, table)

    def read(**kwargs):
        return [i for i in BinlogReader.for_schemas(cdc_user, [schema], **kwargs)
                if isinstance(i, (ChangeRecord, SchemaChangeEvent))]

    whole = read(start=start, end=end)
    ranges = plan_decode_ranges(conn, start, end, pieces=3, min_bytes=1)
    assert len(ranges) == 3 and ranges[1].decode_after is not None
    pieces = [item for r in ranges for item in read(start=r.read_from, end=r.end, decode_after=r.decode_after)]
    assert len(pieces) == len(whole) > 25000
    assert sorted(pieces, key=lambda i: (i.offset.sort_key, getattr(i, "row", 0), getattr(i, "part", 0))) == whole


def test_many_small_transactions_cut_by_listing_windows_decode_in_pieces_to_the_same_records(mysql_server, cdc_user,
                                                                                               database):
    """A range of many transactions is cut by listing a window of events where each cut should fall,
    not the whole range; its pieces read back every record once."""
    from airflow_provider_mysqlcdc.cdc.binlog.ranges import plan_decode_ranges, windowed_cuts

    table, conn = _table(mysql_server, database, "(id INT PRIMARY KEY, v INT, pad VARCHAR(200))")
    start = current_offset(conn)
    with conn.cursor() as cur:
        for i in range(600):  # autocommit: one transaction each
            cur.execute(f"INSERT INTO {table.quoted} VALUES (%s, 0, REPEAT('p', 150))", (i,))
            if i % 4 == 0:
                cur.execute(f"UPDATE {table.quoted} SET v = v + 1 WHERE id = %s", (i // 2,))
    end = current_offset(conn)
    schema = load_table_schema(conn, table)
    assert start.file == end.file, "the test range must lie in one binlog file"

    cuts = windowed_cuts(conn, start, end, 3, window_events=20)
    assert cuts is not None and len(cuts) == 2 and start < cuts[0][1] < cuts[0][0] < cuts[1][1] < cuts[1][0] < end
    ranges = plan_decode_ranges(conn, start, end, pieces=3, min_bytes=1, window_events=20)
    assert [r.end for r in ranges[:2]] == [c[0] for c in cuts]

    def read(**kwargs):
        return [i for i in BinlogReader.for_schemas(cdc_user, [schema], **kwargs) if isinstance(i, ChangeRecord)]

    whole = read(start=start, end=end)
    pieces = [item for r in ranges for item in read(start=r.read_from, end=r.end, decode_after=r.decode_after)]
    assert len(whole) == 750 and [p.offset for p in pieces] == [w.offset for w in whole] and pieces == whole


def test_table_ddl_as_the_server_logs_it_is_reported_per_captured_table(mysql_server, cdc_user, database):
    """Every table-level DDL form, run on the server and read back from its binlog (the server
    rewrites some: DROP TABLE gains a comment, for one)."""
    conn = mysql_server.connect(database)
    names = ["t", "t2", "u", "v", "w", "p", "x"]
    with conn.cursor() as cur:
        for name in ["t", "u", "v", "w", "x"]:
            cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE p (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
                    "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20), "
                    "PARTITION p2 VALUES LESS THAN MAXVALUE)")
    K = TableEventKind
    t, t2, u, v, w, p, x = (TableId(database, n) for n in names)
    cases = [
        ("TRUNCATE t", [(K.TRUNCATED, t)]),
        (f"TRUNCATE TABLE `{database}`.`t`", [(K.TRUNCATED, t)]),
        ("/* nightly */ TRUNCATE /* all */ TABLE t -- done", [(K.TRUNCATED, t)]),
        ("ALTER TABLE t ADD COLUMN c INT DEFAULT 7", [(K.ALTERED, t)]),
        ("RENAME TABLE t TO t2, u TO t", [(K.RENAMED, t), (K.REPLACED, t2), (K.RENAMED, u), (K.REPLACED, t)]),
        ("ALTER TABLE t2 RENAME TO u", [(K.RENAMED, t2), (K.REPLACED, u)]),
        ("DROP TABLE v, w", [(K.DROPPED, v), (K.DROPPED, w)]),
        ("CREATE TABLE v (id INT PRIMARY KEY)", [(K.CREATED, v)]),
        ("CREATE OR REPLACE TABLE v (id INT PRIMARY KEY, z INT)", [(K.REPLACED, v)]),
        ("ALTER TABLE p TRUNCATE PARTITION p0", [(K.ROWS_CHANGED, p)]),
        ("ALTER TABLE p DROP PARTITION p1", [(K.ROWS_CHANGED, p)]),
        ("ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE x", [(K.ROWS_CHANGED, p), (K.ROWS_CHANGED, x)]),
        ("CREATE TABLE other_db_free (id INT PRIMARY KEY)", []),  # not captured: not reported
    ]
    start = current_offset(conn)
    with conn.cursor() as cur:
        for statement, _ in cases:
            cur.execute(statement)
    end = current_offset(conn)
    captured = [TableId(database, n) for n in names]
    reader = BinlogReader(cdc_user, start=start, end=end, tables=captured, key_columns={})
    events = [i for i in reader if isinstance(i, SchemaChangeEvent)]
    assert [[(c.kind, c.table) for c in e.changes] for e in events] == [want for _, want in cases if want]


def test_drop_database_drops_every_captured_table_of_it(mysql_server, cdc_user, database):
    table, conn = _table(mysql_server, database)
    start = current_offset(conn)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{database}`")
        cur.execute(f"CREATE DATABASE `{database}`")  # the fixture drops it again
    reader = BinlogReader(cdc_user, start=start, end=current_offset(conn),
                          tables=[table, TableId(database, "never_created"), TableId("elsewhere", "t")], key_columns={})
    events = [i for i in reader if isinstance(i, SchemaChangeEvent)]
    assert [[(c.kind, c.table) for c in e.changes] for e in events] == [
        [(TableEventKind.DROPPED, TableId(database, "never_created")), (TableEventKind.DROPPED, table)]]
