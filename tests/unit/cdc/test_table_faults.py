"""Which errors are one table's, and how a table's failure travels without stopping the others:
the classification (cdc/errors.py, sinks), a partition's rows around a change that cannot be typed
(stream/reading.py), and an XA group holding one (cdc/binlog/reader.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pymysql
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_mysqlcdc.cdc.binlog.xa import rows_at_commit
from airflow_provider_mysqlcdc.cdc.errors import (
    BinlogPurgedError,
    ConfigurationError,
    SchemaChangedError,
    is_table_fault,
)
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation, TableFailed
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.sinks.change_columns import TableChanges
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.stream.reading import ChangeTyping, ReadItem

GOOD, BAD = TableId("db", "good"), TableId("db", "bad")


def _raised_from(exc: BaseException, cause: BaseException) -> BaseException:
    try:
        raise exc from cause
    except BaseException as raised:  # noqa: BLE001
        return raised


@pytest.mark.parametrize("exc", [
    ValueError("bad value"), pa.ArrowInvalid("Column 'dt' is declared non-nullable but contains nulls"),
    UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), LookupError("unknown encoding: macce"),
    TypeError("no order-preserving encoding for str"), OverflowError("int too big"), IndexError("enum index"),
    SchemaChangedError("a type the sink cannot take"), NotImplementedError("cast"),
])
def test_errors_of_a_tables_data_or_schema_are_that_tables(exc):
    assert is_table_fault(exc)


@pytest.mark.parametrize("exc", [
    OSError("disk full"), ConnectionResetError(), TimeoutError(), MemoryError(),
    pymysql.err.OperationalError(2013, "Lost connection"), pymysql.err.ProgrammingError(1146, "no table"),
    ConfigurationError("bad option"), BinlogPurgedError("purged"), RuntimeError("checkpoint"),
    _raised_from(ValueError("while reading"), OSError("the object store failed")),
])
def test_errors_of_the_source_the_storage_or_the_pipeline_are_not_a_tables(exc):
    assert not is_table_fault(exc)


def _change(table: TableId, position: int, value, row: int = 0) -> ChangeRecord:
    return ChangeRecord(Operation.CREATE, table, None, {"id": position * 10 + row, "v": value},
                        BinlogOffset("b.000001", position), row)


def _items(items: list[ReadItem]) -> list:
    return [i.item for i in sorted(items, key=lambda i: i.key)]


def test_a_change_that_cannot_be_typed_fails_its_table_after_the_events_before_it_and_not_the_others():
    run = [_change(GOOD, 100, 1), _change(BAD, 110, 1), _change(BAD, 120, 2), _change(BAD, 120, 3, row=1),
           _change(GOOD, 130, 2), _change(BAD, 140, "text where the run has numbers"), _change(BAD, 150, 4),
           _change(GOOD, 160, 3)]
    typing = ChangeTyping()  # no schema: every column's type is inferred from the run's values

    read = typing.changes(run, [True] * len(run))
    read += typing.changes([_change(BAD, 170, 5), _change(GOOD, 180, 4)], [True, True])  # the next run

    assert [i.key for i in read] == sorted(i.key for i in read)  # a read's items stay in binlog order
    items = _items(read)
    assert [(type(i).__name__, i.table_id) for i in items] == [
        ("TableChanges", GOOD), ("TableChanges", BAD), ("TableFailed", BAD), ("TableChanges", GOOD)]
    bad_changes, failure = items[1], items[2]
    assert isinstance(bad_changes, TableChanges) and bad_changes.data.column("v").to_pylist() == [1, 2, 3]
    assert failure.offset == BinlogOffset("b.000001", 140) and "cannot be typed" in failure.reason
    assert items[0].data.column("v").to_pylist() == [1, 2, 3] and items[3].data.column("v").to_pylist() == [4]


def test_a_failure_the_reader_reports_is_sent_once_and_its_table_sends_nothing_after_it():
    typing = ChangeTyping()
    failure = TableFailed(BAD, BinlogOffset("b.000001", 200), "a change at b.000001:200 cannot be decoded")

    read = typing.fail(failure) + typing.fail(TableFailed(BAD, BinlogOffset("b.000001", 300), "again"))
    read += typing.changes([_change(BAD, 310, 1), _change(GOOD, 320, 1)], [True, True])

    assert [(type(i).__name__, i.table_id) for i in _items(read)] == [("TableFailed", BAD), ("TableChanges", GOOD)]


def test_an_xa_group_with_a_failed_change_sends_none_of_that_tables_rows_and_the_failure_at_its_commit():
    held = [_change(GOOD, 100, 1), _change(BAD, 110, 1), TableFailed(BAD, BinlogOffset("b.000001", 120), "decode"),
            _change(GOOD, 130, 2), _change(BAD, 140, 2)]
    commit = BinlogOffset("b.000001", 500)

    out = list(rows_at_commit(held, commit, "0-1-9", 7))

    assert out[0] == TableFailed(BAD, commit, "decode")
    assert [(r.table_id, r.after["v"], r.offset, r.row) for r in out[1:]] == [(GOOD, 1, commit, 0), (GOOD, 2, commit, 1)]


@pytest.fixture()
def sink(tmp_path):
    table = TableId("db", "t")
    sink = DeltaSink(str(tmp_path / "lake"))
    write_deltalake(sink.table_uri(table), pa.table({"id": [1, 2], "v": [1, 2]}))
    return sink, table


def _merge_error(sink: DeltaSink, table: TableId, rows: pa.Table) -> BaseException:
    with pytest.raises(Exception) as raised:
        DeltaTable(sink.table_uri(table)).merge(rows, "t.id = s.id", source_alias="s", target_alias="t") \
            .when_matched_update_all().when_not_matched_insert_all().execute()
    return raised.value


def test_rows_a_delta_constraint_refuses_are_the_tables_fault(sink):
    sink, table = sink
    DeltaTable(sink.table_uri(table)).alter.add_constraint({"v_not_negative": "v >= 0"})

    assert sink.refuses(table, _merge_error(sink, table, pa.table({"id": [3], "v": [-1]})))


def test_a_data_file_the_storage_cannot_read_is_not_the_tables_fault(sink):
    sink, table = sink
    (data_file,) = DeltaTable(sink.table_uri(table)).file_uris()
    Path(data_file).unlink()
    Path(data_file).mkdir()

    assert not sink.refuses(table, _merge_error(sink, table, pa.table({"id": [1], "v": [5]})))
