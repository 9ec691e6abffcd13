"""The merge's rules, which every sink format must keep (sinks/base.py): a change applies to its
row only when it is newer than the row (a split read after the change holds it already), a delete
removes the row, and rows of other keys stay as they are. On a real table of each format (and each
merge mode of a format that has several)."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from tests.unit.stream.harness import SINK_VARIANTS, delete, insert, off, update

T = TableId("shop", "t")
ID = Column("id", "int", "int(11)", False)
V = Column("v", "varchar", "varchar(20)", True, charset="utf8mb4", collation="utf8mb4_bin")
SCHEMA = TableSchema(T, (ID, V), ("id",))


@pytest.fixture(params=SINK_VARIANTS)
def writer(request, tmp_path) -> SinkWriter:
    name, _, mode = request.param.partition("/")
    sink = open_sink(SinkSpec(str(tmp_path / "lake"), name, merge_mode=mode or None))
    sink.prepare(SCHEMA)
    w = SinkWriter(sink, SCHEMA, "id", KeyOrdering(ID))
    w.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", None, 10), off(50)), [{"id": 1, "v": "a"}, {"id": 2, "v": "a"}])
    w.write_split(FinishedSplit(SnapshotSplit(T, 0, "id", 10, None), off(5)), [{"id": 11, "v": "a"}, {"id": 12, "v": "a"}])
    return w


def held(w: SinkWriter) -> dict[int, str]:
    return {r["id"]: r["v"] for r in w.sink.read(T).to_pylist()}


def test_changes_older_than_their_rows_leave_them_and_newer_ones_apply(writer):
    """Rows 1 and 2 were read as of offset 50, rows 11 and 12 as of 5: the changes at 20 and 30 are
    in the first ones already, and are applied to the others."""
    apply_change_batch({T: writer}, [update(T, 20, {"id": 1, "v": "a"}, {"id": 1, "v": "old"}),
                                     delete(T, 21, id=2, v="a"), insert(T, 22, id=3, v="new"),
                                     update(T, 30, {"id": 11, "v": "a"}, {"id": 11, "v": "x"}),
                                     delete(T, 31, id=12, v="a")], app_id="app", batch_id=1)
    assert held(writer) == {1: "a", 2: "a", 3: "new", 11: "x"}


def test_an_insert_of_a_key_whose_row_is_newer_keeps_the_row(writer):
    apply_change_batch({T: writer}, [insert(T, 40, id=1, v="stale")], app_id="app", batch_id=1)
    assert held(writer)[1] == "a"
