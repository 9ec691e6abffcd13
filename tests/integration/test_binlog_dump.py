"""Our own dump connection's framing (cdc/binlog/dump.py) against python-mysql-replication's, on the
same binlog range: every event the reader uses, at the same offset with the same bytes."""

from __future__ import annotations

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XAPrepareEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_mysqlcdc.cdc.binlog.dump import BinlogDump
from airflow_provider_mysqlcdc.cdc.source.server import current_offset

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def plaintext_mariadb(mysql_server):
    """The dump connection speaks MariaDB's binlog, without TLS (dump.py): an external test server
    (``MYSQLCDC_TEST_DSN``) of another kind is read through the library only."""
    with mysql_server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'have_ssl'")
        offers_tls = (cur.fetchone() or ("", ""))[1] == "YES"
    if not mysql_server.info.is_mariadb or offers_tls:
        pytest.skip("the dump connection is for MariaDB servers without TLS")

_LIBRARY_EVENTS = [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, QueryEvent, XidEvent, RotateEvent, GtidEvent,
                   MariadbGtidEvent, TableMapEvent, XAPrepareEvent]
#: their type codes (row events in both versions: MariaDB writes v1)
_TYPES = {2, 4, 16, 19, 23, 24, 25, 30, 31, 32, 33, 38, 162}


def _library_events(source, start):
    """(type, end position, size) of the library's events from ``start`` to the binlog's end, but the
    artificial ones (no position; a rotate event without a timestamp)."""
    stream = BinLogStreamReader(connection_settings=source.replication_settings(), server_id=6401,
                                log_file=start.file, log_pos=start.position, resume_stream=True, blocking=False,
                                only_events=_LIBRARY_EVENTS)
    try:
        return [(event.event_type, int(event.packet.log_pos), int(event.packet.event_size)) for event in stream
                if int(event.packet.log_pos) and (event.event_type != 4 or int(event.timestamp))]
    finally:
        stream.close()


def _dumped_events(source, start):
    dump = BinlogDump(source, start, server_id=6402)
    try:
        return [(e.type, e.end_position, e.size) for e in dump.events()
                if e.type in _TYPES and e.end_position and (e.type != 4 or e.timestamp)]
    finally:
        dump.close()


def test_the_dump_frames_every_event_the_reader_uses_as_the_library_does(mysql_server, cdc_user, database):
    conn = mysql_server.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v LONGBLOB)")
        start = current_offset(conn)
        for i in range(50):
            cur.execute("INSERT INTO t VALUES (%s, REPEAT('x', %s))", (i, 10 * i))
        cur.execute("UPDATE t SET v = CONCAT(v, 'y') WHERE id < 20")
        cur.execute("DELETE FROM t WHERE id >= 40")
        cur.execute("ALTER TABLE t ADD COLUMN w INT")  # a query event
        cur.execute("FLUSH BINARY LOGS")  # a rotation in the range
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t (id, v) VALUES (100, 'in a transaction')")
        cur.execute("COMMIT")
    dumped = _dumped_events(cdc_user, start)
    assert dumped == _library_events(cdc_user, start)
    assert {kind for kind, _, _ in dumped} >= {2, 4, 16, 19, 23, 24, 25, 162}


def test_an_event_larger_than_a_packet_arrives_whole(mysql_server, cdc_user, database):
    """A row of 20 MiB makes an event that continues over two packets (16 MiB - 1 bytes each at most)."""
    with mysql_server.connect() as admin, admin.cursor() as cur:
        cur.execute("SELECT @@global.max_allowed_packet")
        before = cur.fetchone()[0]
        cur.execute("SET GLOBAL max_allowed_packet = 64 * 1024 * 1024")
        try:
            conn = mysql_server.connect(database)  # a session of the new packet size
            with conn.cursor() as write:
                write.execute("CREATE TABLE big (id INT PRIMARY KEY, v LONGBLOB)")
                start = current_offset(conn)
                write.execute("INSERT INTO big VALUES (1, REPEAT('z', 20 * 1024 * 1024))")
        finally:
            cur.execute("SET GLOBAL max_allowed_packet = %s", (before,))
    dump = BinlogDump(cdc_user, start, server_id=6403)
    try:
        rows = [e for e in dump.events() if e.type in (23, 30)]
    finally:
        dump.close()
    assert len(rows) == 1 and rows[0].size > 20 * 1024 * 1024
    assert rows[0].body.count(b"z") == 20 * 1024 * 1024


def test_a_purged_binlog_is_the_servers_error(mysql_server, cdc_user, database):
    conn = mysql_server.connect(database)
    start = current_offset(conn)
    missing = start.at("binlog.999999", 4)
    dump = BinlogDump(cdc_user, missing, server_id=6404)
    try:
        with pytest.raises(pymysql.err.OperationalError) as raised:
            list(dump.events())
    finally:
        dump.close()
    assert raised.value.args[0] == 1236  # ER_MASTER_FATAL_ERROR_READING_BINLOG, as through the library


def test_event_bodies_read_as_the_library_reads_them(mysql_server, cdc_user, database):
    from airflow_provider_mysqlcdc.cdc.binlog import dump as d

    conn = mysql_server.connect(database)
    with conn.cursor() as cur:
        start = current_offset(conn)
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), e ENUM('a','b'), s SET('x','y'))")
        cur.execute("INSERT INTO t VALUES (1, 'é', 'a', 'x,y')")
        cur.execute("UPDATE t SET v = 'w' WHERE id = 1")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("DELETE FROM t")
        for gtrid, one_phase in (("prepared", False), ("one phase", True)):
            cur.execute(f"XA START '{gtrid}', 'branch', 7")
            cur.execute("INSERT INTO t (id, v) VALUES (%s, 'xa')", (len(gtrid),))
            cur.execute(f"XA END '{gtrid}', 'branch', 7")
            if one_phase:
                cur.execute(f"XA COMMIT '{gtrid}', 'branch', 7 ONE PHASE")
            else:
                cur.execute(f"XA PREPARE '{gtrid}', 'branch', 7")
                cur.execute(f"XA COMMIT '{gtrid}', 'branch', 7")
    stream = BinLogStreamReader(connection_settings=cdc_user.replication_settings(), server_id=6405,
                                log_file=start.file, log_pos=start.position, resume_stream=True, blocking=False,
                                only_events=_LIBRARY_EVENTS)
    library = {}
    try:
        for event in stream:
            library.setdefault((event.event_type, int(event.packet.log_pos)), event)
    finally:
        stream.close()
    dump = BinlogDump(cdc_user, start, server_id=6406)
    checked = set()
    try:
        for e in dump.events():
            theirs = library.get((e.type, e.end_position))
            if theirs is None or not e.end_position:
                continue
            checked.add(e.type)
            if e.type == d.QUERY:
                assert d.query(e.body) == (theirs.schema.decode(), theirs.query)
            elif e.type == d.XID:
                assert d.xid(e.body) == theirs.xid
            elif e.type == d.ROTATE:
                assert d.rotate(e.body) == (theirs.next_binlog, theirs.position)
            elif e.type == d.MARIADB_GTID:
                assert d.mariadb_gtid(e.body, e.server_id)[0] == theirs.gtid
            elif e.type == d.TABLE_MAP:
                assert d.table_map_header(e.body)[:3] == (theirs.table_id, theirs.schema, theirs.table)
            elif e.type == d.XA_PREPARE:
                assert d.xa_prepare(e.body) == (bool(theirs.one_phase), theirs.xid_format_id, bytes(theirs.xid_gtrid),
                                                bytes(theirs.xid_bqual))
            elif e.type in d.ROW_OPERATIONS:
                table_id, count, _ = d.rows_header(e.type, e.body)
                assert (table_id, count) == (theirs.table_id, theirs.number_of_columns)
    finally:
        dump.close()
    assert checked >= {d.QUERY, d.XID, d.ROTATE, d.MARIADB_GTID, d.TABLE_MAP, d.XA_PREPARE, 23, 24, 25}


def test_table_map_columns_read_as_the_library_reads_them(mysql_server, cdc_user, database):
    from airflow_provider_mysqlcdc.cdc.binlog import dump as d

    conn = mysql_server.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE m (id BIGINT UNSIGNED PRIMARY KEY, a TINYINT UNSIGNED, b INT, c DECIMAL(10,3), "
                    "f FLOAT, g DOUBLE, v VARCHAR(30) CHARACTER SET latin1, ch CHAR(5), t TEXT, bl BLOB, "
                    "e ENUM('a','b') CHARACTER SET latin1, s SET('x','y'), dt DATETIME(3), ts TIMESTAMP(6) NULL, "
                    "tm TIME(2), bi BIT(10), y YEAR, j JSON, u SMALLINT UNSIGNED, k MEDIUMINT)")
        start = current_offset(conn)
        cur.execute("INSERT INTO m (id) VALUES (1)")
        cur.execute("SELECT ID, COLLATION_NAME FROM information_schema.COLLATIONS")
        collations = dict(cur.fetchall())
    stream = BinLogStreamReader(connection_settings=cdc_user.replication_settings(), server_id=6407,
                                log_file=start.file, log_pos=start.position, resume_stream=True, blocking=False,
                                only_events=[TableMapEvent])
    try:
        theirs = next(e for e in stream if isinstance(e, TableMapEvent) and e.table == "m").columns
    finally:
        stream.close()
    dump = BinlogDump(cdc_user, start, server_id=6408)
    try:
        body = next(e.body for e in dump.events() if e.type == d.TABLE_MAP)
    finally:
        dump.close()
    ours = d.table_map_columns(body, d.table_map_header(body)[3])
    assert [c.name for c in ours] == [c.name for c in theirs]
    for mine, library in zip(ours, theirs):
        assert (mine.type, mine.unsigned, mine.is_primary) == (library.type, library.unsigned, library.is_primary), mine
        assert mine.max_length == getattr(library, "max_length", None), mine
        assert mine.decimals == getattr(library, "decimals", None), mine
        assert (mine.enum_values, mine.set_values) == (library.enum_values, library.set_values), mine
        assert (collations.get(mine.collation_id) if mine.collation_id else None) == library.collation_name, mine
        assert (mine.character_set_name, mine.collation_name) == (library.character_set_name,
                                                                   library.collation_name), mine
        assert mine.type != FIELD_TYPE.BIT or (mine.bits, mine.bytes) == (library.bits, library.bytes), mine
    # what makes the comparison mean something: the metadata was there to read
    assert {collations[c.collation_id] for c in ours if c.collation_id} >= {"latin1_swedish_ci", "utf8mb4_general_ci"}
    assert [c.name for c in ours if c.unsigned] == ["id", "a", "y", "u"] and ours[0].is_primary  # YEAR: unsigned
    assert ours[10].enum_values == ["", "a", "b"] and ours[11].set_values == ["x", "y"]
