"""The merge-on-read writer's key index (sinks/key_index.py), on every table format: once it holds a
table, a batch of random keys reads no data file, and whatever else happens to the table (another
writer's commits, a commit whose outcome was never heard, a row limit) the merges stay exact."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import pytest
from deltalake import DeltaTable
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Transaction

from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog, LiveFile
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.sinks.factory import SINK_FORMATS, open_sink
from airflow_provider_mysqlcdc.sinks.iceberg.sink import IcebergSink
from airflow_provider_mysqlcdc.sinks.key_index import KeyIndex, _FileKeys, _search
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from tests.unit.sinks.delta.test_merge_on_read import ROWS, SCHEMA, T, held, random_batches, snapshotted
from tests.unit.stream.harness import delete, insert, off, update


@pytest.fixture(params=list(SINK_FORMATS))
def sink_format(request) -> str:
    return request.param


def data_files(writer: SinkWriter) -> set[str]:
    """The table's data files, as the format names them when it reads one."""
    sink = writer.sink
    if isinstance(sink, DeltaSink):
        uri = sink.table_uri(T)
        return set(DeltaLog(uri).files(DeltaTable(uri)))
    assert isinstance(sink, IcebergSink)
    return set(sink.open_table(T).inspect.data_files().column("file_path").to_pylist())


def recording_reads(monkeypatch) -> list[str]:
    """Every file a format's merge opens from now on (Delta: a data file read through the log;
    Iceberg: any file opened through the table's FileIO)."""
    reads: list[str] = []
    original_read, original_input = LiveFile.read, PyArrowFileIO.new_input
    monkeypatch.setattr(LiveFile, "read", lambda self, uri, columns=None: reads.append(self.path)
                        or original_read(self, uri, columns))
    monkeypatch.setattr(PyArrowFileIO, "new_input", lambda self, location: reads.append(location)
                        or original_input(self, location))
    return reads


def test_a_batch_reads_no_data_file_once_the_index_holds_the_table(tmp_path, monkeypatch, sink_format):
    writer = snapshotted(tmp_path / "lake", "merge-on-read", sink_format)
    first, _ = random_batches(seed=5, batches=1, per_batch=50)
    apply_change_batch({T: writer}, first[0], app_id="app", batch_id=1)
    batches, _ = random_batches(seed=6, batches=2, per_batch=50)
    for batch_id, batch in enumerate(batches, start=10):
        held_before = data_files(writer)
        reads = recording_reads(monkeypatch)
        apply_change_batch({T: writer}, batch, app_id="app", batch_id=batch_id)
        monkeypatch.undo()
        assert not held_before & set(reads)


def test_two_writers_merging_in_turn_each_see_the_others_changes(tmp_path, sink_format):
    first = snapshotted(tmp_path / "lake", "merge-on-read", sink_format)
    second = SinkWriter(open_sink(SinkSpec(str(tmp_path / "lake"), sink_format, merge_mode="merge-on-read")), SCHEMA,
                        "id", KeyOrdering(SCHEMA.columns[0]))
    batches, rows = random_batches(seed=8, batches=8, per_batch=60)
    for batch_id, batch in enumerate(batches):
        apply_change_batch({T: (first, second)[batch_id % 2]}, batch, app_id="app", batch_id=batch_id)
    assert held(first) == rows


def test_an_index_over_its_row_limit_keeps_the_merges_exact_and_its_rows_bounded(tmp_path, sink_format):
    writer = snapshotted(tmp_path / "lake", "merge-on-read", sink_format)
    limit = ROWS // 2 + 200  # one snapshot file and a few merged ones
    writer.sink.key_index = KeyIndex(max_rows=limit)  # type: ignore[attr-defined]
    batches, rows = random_batches(seed=9, batches=8, per_batch=60)
    for batch_id, batch in enumerate(batches):
        apply_change_batch({T: writer}, batch, app_id="app", batch_id=batch_id)
        assert writer.sink.key_index.rows <= limit  # type: ignore[attr-defined]
    assert held(writer) == rows


def test_a_commit_whose_outcome_was_never_heard_is_taken_from_the_table_by_the_next_batch(tmp_path, monkeypatch,
                                                                                          sink_format):
    writer = snapshotted(tmp_path / "lake", "merge-on-read", sink_format)
    batches, rows = random_batches(seed=10, batches=4, per_batch=60)
    apply_change_batch({T: writer}, batches[0], app_id="app", batch_id=0)
    owner, name = (DeltaLog, "commit") if sink_format == "delta" else (Transaction, "commit_transaction")
    original = getattr(owner, name)

    def landed_then_lost(self, *args, **kwargs):
        original(self, *args, **kwargs)
        raise ConnectionResetError("the store's answer was lost")

    monkeypatch.setattr(owner, name, landed_then_lost)
    with pytest.raises(ConnectionResetError):
        apply_change_batch({T: writer}, batches[1], app_id="app", batch_id=1)
    monkeypatch.setattr(owner, name, original)
    for batch_id, batch in enumerate(batches[2:], start=2):
        apply_change_batch({T: writer}, batch, app_id="app", batch_id=batch_id)
    assert held(writer) == rows


KEYS = {
    "bigint unsigned": ((Column("id", "bigint", "bigint(20) unsigned", False, unsigned=True),), lambda i: {"id": 2**63 + i}),
    "datetime": ((Column("id", "datetime", "datetime", False),),
                 lambda i: {"id": dt.datetime(2020, 1, 1) + dt.timedelta(seconds=i)}),
    "varbinary": ((Column("id", "varbinary", "varbinary(20)", False),), lambda i: {"id": f"k{i:05d}".encode()}),
    "composite": ((Column("id", "int", "int(11)", False),
                   Column("sub", "varchar", "varchar(8)", False, charset="utf8mb4", collation="utf8mb4_bin")),
                  lambda i: {"id": i // 3, "sub": "abc"[i % 3]}),
}


@pytest.mark.parametrize("kind", list(KEYS))
def test_rows_of_every_key_kind_are_found(tmp_path, kind, sink_format):
    key_columns, key_of = KEYS[kind]
    value = Column("v", "varchar", "varchar(20)", True, charset="utf8mb4", collation="utf8mb4_bin")
    table = TableId("shop", kind.replace(" ", "_"))
    schema = TableSchema(table, (*key_columns, value), tuple(c.name for c in key_columns))
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), sink_format, merge_mode="merge-on-read"))
    sink.prepare(schema)
    writer = SinkWriter(sink, schema, "id", KeyOrdering(key_columns[0]))
    count = 600
    writer.write_split(FinishedSplit(SnapshotSplit(table, 0, "id", None, None), off(5)),
                       [{**key_of(i), "v": "a"} for i in range(count)])
    rows = {i: "a" for i in range(count)}
    rng, n = random.Random(kind), 10
    for batch_id in range(5):
        batch = []
        for i in rng.sample(range(count + 100), 80):
            n += 1
            if i in rows and rng.random() < 0.3:
                batch.append(delete(table, n, **key_of(i), v=rows.pop(i)))
            elif i in rows:
                batch.append(update(table, n, {**key_of(i), "v": rows[i]}, {**key_of(i), "v": f"u{n}"}))
                rows[i] = f"u{n}"
            else:
                rows[i] = f"i{n}"
                batch.append(insert(table, n, **key_of(i), v=rows[i]))
        apply_change_batch({table: writer}, batch, app_id="app", batch_id=batch_id)
    found = sink.read(table).to_pylist()
    expected = sorted((tuple(key_of(i).values()), v) for i, v in rows.items())
    assert sorted((tuple(r[c.name] for c in key_columns), r["v"]) for r in found) == expected


def test_the_binary_search_finds_every_copy_of_every_key_and_nothing_else():
    rng = np.random.default_rng(1)
    for _ in range(300):
        n = int(rng.integers(0, 50))
        keys = rng.integers(0, 30, n)  # keys held twice and more as well
        order = np.argsort(keys, kind="stable")
        entry = _FileKeys(n, np.zeros(n, np.int64), keys[order], order, None)
        query = rng.integers(-2, 33, int(rng.integers(0, 20)))
        rows, positions = _search(entry, query)
        expected = sorted((i, p) for i, k in enumerate(query.tolist()) for p in range(n) if keys[p] == k)
        assert sorted(zip(rows.tolist(), positions.tolist())) == expected
