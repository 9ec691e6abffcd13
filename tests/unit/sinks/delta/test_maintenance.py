"""Delta table maintenance (sinks/delta/maintenance.py) on real Delta tables on local disk, and the
requests and reports a maintenance task and the stream exchange (state/maintenance.py)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.maintenance import (
    MaintenancePolicy,
    MaintenanceReport,
    MaintenanceRequest,
    TableMaintenance,
)
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.changelog import CHANGELOG_SUFFIX
from airflow_provider_mysqlcdc.sinks.delta.maintenance import RETENTION, maintain_table
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from airflow_provider_mysqlcdc.state.maintenance import KEEP_REPORTS, MaintenanceRequests, new_request_id
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.verify import read_delta

T = TableId("db", "t")
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("_cdc_chunk", pa.string())])


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "_cdc_chunk": [f"k{i:04d}" for i in ids]}, schema=SCHEMA)


@pytest.fixture
def sink(tmp_path) -> DeltaSink:
    sink = DeltaSink(str(tmp_path / "lake"))
    for i in range(6):  # six small files, as six stream batches leave them
        write_deltalake(sink.table_uri(T), rows(i * 10, i * 10 + 1), mode="append")
    return sink


def test_compaction_leaves_one_file_with_every_row_and_a_checkpoint(sink):
    uri = sink.table_uri(T)
    before = read_delta(uri).sort_by("id")
    [done] = maintain_table(sink, T, MaintenancePolicy())
    table = DeltaTable(uri)
    assert (done.table, done.files_before, done.files_after, done.files_rewritten) == (uri, 6, 1, 6)
    assert len(table.file_uris()) == 1 and read_delta(uri).sort_by("id").equals(before)
    assert done.checkpoint_version == table.version() and done.files_vacuumed == 0


def test_a_changelog_table_is_bin_packed_too(sink):
    changelog = sink.table_uri(T) + CHANGELOG_SUFFIX
    for i in range(3):
        write_deltalake(changelog, pa.table({"op": ["c"], "version": [i]}), mode="append")
    _, log = maintain_table(sink, T, MaintenancePolicy(checkpoint=False))
    assert (log.table, log.files_before, log.files_after, log.checkpoint_version) == (changelog, 3, 1, None)


def test_vacuum_deletes_only_files_that_left_longer_ago_than_the_retention(sink):
    uri = sink.table_uri(T)
    maintain_table(sink, T, MaintenancePolicy(checkpoint=False))  # six files replaced by one, just now
    [done] = maintain_table(sink, T, MaintenancePolicy(compact=False, checkpoint=False, vacuum_retention_s=3600))
    assert done.files_vacuumed == 0
    assert DeltaTable(uri).metadata().configuration[RETENTION] == "interval 3600 seconds"
    assert read_delta(uri, version=5).num_rows == 12  # time travel within the retention
    [done] = maintain_table(sink, T, MaintenancePolicy(compact=False, checkpoint=False, vacuum_retention_s=0))
    assert done.files_vacuumed == 6 and read_delta(uri).num_rows == 12


def test_vacuum_never_deletes_a_file_no_version_names(sink, tmp_path):
    """A chunk's executors write data files before its driver commits them: vacuum leaves them."""
    uri = sink.table_uri(T)
    write_deltalake(str(tmp_path / "other"), rows(99))
    [written] = DeltaTable(str(tmp_path / "other")).file_uris()
    pending = f"{uri}/part-not-committed-yet.parquet"
    with open(written.removeprefix("file://"), "rb") as src, open(pending, "wb") as dst:
        dst.write(src.read())
    maintain_table(sink, T, MaintenancePolicy(compact=False, checkpoint=False, vacuum_retention_s=0))
    assert os.path.exists(pending)


def test_a_table_the_sink_does_not_have_is_skipped(tmp_path):
    assert maintain_table(DeltaSink(str(tmp_path / "lake")), T, MaintenancePolicy()) == []


@pytest.mark.parametrize("kwargs, message", [
    ({"vacuum_retention_s": -1}, "vacuum retention must be 0 or more seconds"),
    ({"target_file_bytes": 1000}, "at least 1 MiB"),
    ({"fold_share": 0}, "fold share must be above 0 and at most 1"),
    ({"fold_share": 1.5}, "fold share must be above 0 and at most 1"),
])
def test_a_bad_policy_is_refused_naming_the_setting(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        MaintenancePolicy(**kwargs)


def test_a_stream_job_refuses_a_negative_maintenance_interval():
    with pytest.raises(ConfigurationError, match="maintenance_every_s must be 0"):
        StreamJob("/state", SinkSpec("/lake"), maintenance_every_s=-1)


def test_requests_are_pending_until_answered_oldest_first_and_reports_are_kept(tmp_path):
    requests = MaintenanceRequests(PipelineState(str(tmp_path / "state")))
    first, second = (MaintenanceRequest(new_request_id() + n, MaintenancePolicy(), [T.quoted], "task", at)
                     for n, at in (("a", 2.0), ("b", 1.0)))
    requests.submit(first)
    requests.submit(second)
    assert [r.request_id for r in requests.pending()] == [second.request_id, first.request_id]
    report = MaintenanceReport(first.request_id, "the stream x", first.policy, [TableMaintenance("/lake/db/t", 6, 1)])
    requests.answer(report)
    assert [r.request_id for r in requests.pending()] == [second.request_id]
    assert requests.report(first.request_id) == report
    requests.withdraw(second.request_id)
    assert requests.pending() == [] and requests.report(second.request_id) is None


def test_only_the_latest_reports_are_kept(tmp_path):
    requests = MaintenanceRequests(PipelineState(str(tmp_path / "state")))
    ids = [f"20260101T0000{n:02d}-x" for n in range(KEEP_REPORTS + 2)]
    for request_id in ids:
        requests.answer(MaintenanceReport(request_id, "task", MaintenancePolicy()))
    assert requests.report(ids[0]) is None and requests.report(ids[1]) is None and requests.report(ids[-1])


def test_maintenance_records_round_trip():
    report = MaintenanceReport("r", "the stream x", MaintenancePolicy(vacuum_retention_s=60),
                               [TableMaintenance("/lake/db/t", 6, 1, 6, 2, 9, "note")], 1.5)
    assert decode(MaintenanceReport, encode(report), "test") == report
    request = MaintenanceRequest("r", MaintenancePolicy(compact=False), ["`db`.`t`"], "task", 1.0)
    assert decode(MaintenanceRequest, encode(request), "test") == request
