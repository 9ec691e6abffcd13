"""The row decoders (binlog/row_decoder.py) against python-mysql-replication's own decoding.

The compiled decoder, its pure-Python twin and the library (with the normaliser) give the same
change records, value for value and type for type, on every type the value-fidelity matrix holds,
through inserts, updates (key changes included) and deletes. Table maps are parsed once per table
id, and forgotten where a server restart gives the same id to another table.
"""

from __future__ import annotations

import logging
import random

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import DECODER_VARIABLE, chosen_decoder
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, ChangeRows
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.sinks.change_columns import change_columns
from devtools.throwaway_server import ThrowawayMariaDB

from .test_value_fidelity import (
    COLUMNS,
    GEOMETRY,
    MAX_ROW,
    MIN_ROW,
    MORE_COLUMNS,
    MORE_ROWS,
    NULL_ROW,
    _insert,
    _random_rows,
)

pytestmark = pytest.mark.integration

OWN_DECODERS = ("python", "compiled")


@pytest.fixture()
def restartable_server(tmp_path):
    """A server of the test's own, in a datadir that outlives a restart."""
    server = ThrowawayMariaDB(base_dir=tmp_path / "mariadb")
    server.start()
    yield server
    server.stop()


def _records(source, schemas, start, end, decoder: str, framing: str = "auto", columnar: bool = False
             ) -> tuple[list[ChangeRecord], BinlogReader]:
    """The reader's change records (``columnar``: its ``ChangeRows`` as records, none left out)."""
    reader = BinlogReader.for_schemas(source, schemas, start=start, end=end, decoder=decoder, framing=framing,
                                      columnar=columnar)
    items = list(reader)
    assert columnar == any(isinstance(i, ChangeRows) for i in items)
    return [r for i in items for r in (i.records() if isinstance(i, ChangeRows) else [i])
            if isinstance(r, ChangeRecord)], reader


def _assert_identical(expected: list[ChangeRecord], got: list[ChangeRecord], decoder: str) -> None:
    """Record for record, with every value's type and repr (a Decimal's places, a datetime's zone)."""
    assert len(got) == len(expected), decoder
    for want, have in zip(expected, got):
        assert repr(have) == repr(want), f"{decoder} decoder: {have!r} != {want!r}"
        for image_want, image_have in ((want.before, have.before), (want.after, have.after)):
            assert [type(v) for v in (image_have or {}).values()] == [type(v) for v in (image_want or {}).values()]


def _every_type_changes(mysql_server, database):
    """Inserts, updates (key changes too) and deletes over every type: the tables' schemas, the range."""
    all_types, more_types = TableId(database, "all types"), TableId(database, "more types")
    rng = random.Random(11)
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {all_types.quoted} (id INT PRIMARY KEY, "
                    + ", ".join(f"`{n}` {t}" for n, t in COLUMNS.items()) + ")")
        cur.execute(f"CREATE TABLE {more_types.quoted} (id INT PRIMARY KEY, "
                    + ", ".join(f"`{n}` {t}" for n, t in MORE_COLUMNS.items()) + ")")
        start = current_offset(conn)
        cur.execute("BEGIN")  # several rows in one event, both tables in one transaction
        for i, row in enumerate([MAX_ROW, MIN_ROW, NULL_ROW, *_random_rows(rng, 30)]):
            _insert(cur, all_types.quoted, i, row)
        for i, row in enumerate(MORE_ROWS):
            cur.execute(f"INSERT INTO {more_types.quoted} (id, {', '.join(row)}) VALUES (%s{', %s' * len(row)})",
                        [i, *row.values()])
        cur.execute("COMMIT")
        set_list = ", ".join(f"`{n}` = %s" if n not in GEOMETRY else f"`{n}` = ST_GeomFromText(%s)" for n in COLUMNS)
        cur.execute(f"UPDATE {all_types.quoted} SET {set_list} WHERE id = 0", list(MIN_ROW.values()))
        cur.execute(f"UPDATE {all_types.quoted} SET {set_list} WHERE id = 2", list(MAX_ROW.values()))
        cur.execute(f"UPDATE {all_types.quoted} SET ti = ti DIV 2, vc = LEFT(CONCAT('x', vc), 100) WHERE id > 3")
        cur.execute(f"UPDATE {all_types.quoted} SET id = id + 100 WHERE id BETWEEN 4 AND 6")  # key changes
        cur.execute(f"UPDATE {more_types.quoted} SET n = n DIV 2, ci = 'q' WHERE id < 3")
        cur.execute(f"DELETE FROM {all_types.quoted} WHERE id % 3 = 0")
        cur.execute(f"DELETE FROM {more_types.quoted} WHERE id = 1")
        end = current_offset(conn)
    return [load_table_schema(conn, t) for t in (all_types, more_types)], start, end


def test_every_decoder_gives_the_library_records_on_every_type_through_inserts_updates_and_deletes(
        mysql_server, cdc_user, database):
    schemas, start, end = _every_type_changes(mysql_server, database)
    expected, _ = _records(cdc_user, schemas, start, end, "library")
    assert {r.op.value for r in expected} == {"c", "u", "d"} and len(expected) > 60
    for decoder in OWN_DECODERS:
        for framing, framed_by, columnar in (("auto", "ours", False), ("library", "library", False),
                                             ("auto", "ours", True)):
            got, reader = _records(cdc_user, schemas, start, end, decoder, framing, columnar)
            _assert_identical(expected, got, f"{decoder} ({framing} framing{', by column' if columnar else ''})")
            assert set(reader.events_decoded) == {decoder}, "the decoder left a table to the library"
            assert set(reader.events_framed) == {framed_by}


def test_changes_by_column_make_the_change_columns_their_records_make(mysql_server, cdc_user, database):
    """The stream's typing (change_columns) of each table's ``ChangeRows`` and of the same changes as
    records: the same Arrow table, column types and key-change deletes and creates included."""
    schemas, start, end = _every_type_changes(mysql_server, database)
    items = list(BinlogReader.for_schemas(cdc_user, schemas, start=start, end=end, columnar=True))
    for schema in schemas:
        rows = [i for i in items if isinstance(i, ChangeRows) and i.table_id == schema.table_id]
        records = [r for i in rows for r in i.records()]
        assert {r.part for r in records} == ({0, 1} if schema is schemas[0] else {0})  # key changes in the first
        by_column, by_record = change_columns(schema, rows), change_columns(schema, records)
        assert by_column.schema == by_record.schema and by_column.equals(by_record), schema.table_id


def test_rows_no_decoder_takes_are_read_on_by_the_library_from_the_last_transaction_boundary(
        mysql_server, cdc_user, database):
    """A partial row image (binlog_row_image=MINIMAL in one session) is left to the library: our
    framing reads up to it, mid-transaction, then the library reads on from the transaction's start,
    handing out nothing twice and skipping nothing."""
    table = TableId(database, "images")
    conn = mysql_server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, a INT, b VARCHAR(10))")
        start = current_offset(conn)
        cur.execute(f"INSERT INTO {table.quoted} VALUES (1, 1, 'x'), (2, 2, 'y')")
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (3, 3, 'z')")
        cur.execute(f"UPDATE {table.quoted} SET a = 10 WHERE id = 1")  # only the key and `a` are logged
        cur.execute("COMMIT")
        cur.execute("SET SESSION binlog_row_image = 'FULL'")
        cur.execute(f"INSERT INTO {table.quoted} VALUES (4, 4, 'w')")
        end = current_offset(conn)
    schemas = [load_table_schema(conn, table)]
    expected, _ = _records(cdc_user, schemas, start, end, "library")
    assert [r.after["id"] for r in expected if r.op.value == "c" and "b" in r.after][-1] == 4
    got, reader = _records(cdc_user, schemas, start, end, "compiled")
    _assert_identical(expected, got, "compiled")
    assert reader.events_framed["ours"] and reader.events_framed["library"]
    assert reader.events_decoded["library"] >= 1


def test_table_maps_without_column_names_and_charsets_are_left_to_the_library(restartable_server, caplog):
    """MINIMAL row metadata leaves the table map without column names and charsets: the library names
    the columns and guesses the charset while it reads the rows, so the decoders leave them to it."""
    caplog.set_level(logging.INFO, logger="airflow_provider_mysqlcdc.cdc.binlog.table_decoding")
    server = restartable_server
    text, numbers = TableId("d", "text"), TableId("d", "numbers")
    conn = server.connect_root()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE d")
        cur.execute(f"CREATE TABLE {text.quoted} (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"CREATE TABLE {numbers.quoted} (id INT PRIMARY KEY, v DOUBLE)")
        cur.execute("SET GLOBAL binlog_row_metadata = 'MINIMAL'")
        start = current_offset(conn)
        cur.execute(f"INSERT INTO {text.quoted} VALUES (1, 'hello'), (2, NULL)")
        cur.execute(f"INSERT INTO {numbers.quoted} VALUES (1, 2.5)")
        end = current_offset(conn)
    schemas = [load_table_schema(conn, t) for t in (text, numbers)]
    expected, _ = _records(server.root_config(), schemas, start, end, "library")
    got, reader = _records(server.root_config(), schemas, start, end, "compiled")
    _assert_identical(expected, got, "compiled")
    assert reader.events_decoded == {"library": 2}
    assert "decoded by python-mysql-replication" in caplog.text


def test_an_unknown_decoder_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv(DECODER_VARIABLE, "fast")
    with pytest.raises(ConfigurationError, match="Unknown row decoder 'fast'.*auto, compiled, python, library"):
        chosen_decoder()
    monkeypatch.setenv(DECODER_VARIABLE, "python")
    assert chosen_decoder() == "python" and chosen_decoder("compiled") == "compiled"


@pytest.mark.parametrize("decoder", ["library", *OWN_DECODERS])
def test_a_table_id_reused_after_a_restart_decodes_with_its_new_table(restartable_server, decoder):
    """A restarted server numbers its tables from the start again, and the binlog it then begins
    follows a STOP event, not a rotation the library would forget its table maps on: read in one
    go, the new file's rows would be decoded with the old table's map under the old table's name."""
    server = restartable_server
    first, second = TableId("d", "first"), TableId("d", "second")
    conn = server.connect_root()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE d")
        cur.execute(f"CREATE TABLE {first.quoted} (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"CREATE TABLE {second.quoted} (id BIGINT PRIMARY KEY, w DOUBLE, t VARCHAR(10))")
        start = current_offset(conn)
        cur.execute(f"INSERT INTO {first.quoted} VALUES (1, 'one')")
    schemas = [load_table_schema(conn, t) for t in (first, second)]
    conn.close()
    server.stop()  # its datadir is the test's: kept
    server.start()
    conn = server.connect_root()
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {second.quoted} VALUES (7, 0.5, 'two')")  # the first table opened: the same id
        end = current_offset(conn)
    assert end.file != start.file

    records, _ = _records(server.root_config(), schemas, start, end, decoder)
    assert [(r.table_id, r.after) for r in records] == [(first, {"id": 1, "v": "one"}),
                                                     (second, {"id": 7, "w": 0.5, "t": "two"})]

