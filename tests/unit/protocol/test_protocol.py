"""Records that cross process boundaries: versioned, typed, and refused clearly when unknown."""

from __future__ import annotations

import json

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, ProtocolError, ProtocolVersionError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.rules import Route, TableRule
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.protocol.actions import PlanAction
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob, StreamJob
from airflow_provider_mysqlcdc.protocol.lease import LeaseHeartbeat, StopRequest, StreamLease
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.plans import ChunkPlan, TablePlan, TablePlans
from airflow_provider_mysqlcdc.protocol.progress import (
    CheckpointIdentity,
    ChunkProgress,
    NewTable,
    NewTables,
    RunPlanProgress,
    StagedRelease,
    StreamBatchProgress,
    StreamOffsetProgress,
)
from airflow_provider_mysqlcdc.protocol.registry import (
    CapturedTable,
    DriftEvent,
    DriftLog,
    Generation,
    RememberedSchema,
)
from airflow_provider_mysqlcdc.protocol.results import (
    ChunkResult,
    CollectResult,
    DetachedStreamRef,
    StreamPhase,
    StreamResult,
    StreamStatus,
)
from airflow_provider_mysqlcdc.protocol.servers import ServerEpoch, ServerHistory
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.drift import DRIFT, read_drift
from airflow_provider_mysqlcdc.state.registry import GENERATIONS, PipelineState

T = TableId("shop", "orders")
AT = BinlogOffset("binlog.000007", 1234, gtid_set="0-1-42", server_id=1)
SPLIT = FinishedSplit(SnapshotSplit(T, 0, "id", None, 100), AT, BinlogOffset("binlog.000007", 900), rows=99,
                      binlog_events_merged=3, staged="file:///state/staged/split-0.parquet", partitions=2, seconds=1.5)
RULE = TableRule(None, ("notes",), ("e",), (("addr", 3),), ("ssn",),
                 route=Route("shop", "all_orders", global_key=True, column_types=(("id", "int64"),)))

RECORDS = [
    StreamOffset(AT, 3),
    Generation(2, {T: CapturedTable("id", [SPLIT])}, {T}, "2026-11-23T00:00:00+00:00"),
    DriftLog({T: [DriftEvent(TableEventKind.RENAMED, AT, "RENAME TABLE", 1.0)]}),
    StreamOffsetProgress(StreamOffset(AT, 3), 1.0, "/lake", "mysqlcdc-1"),
    StreamBatchProgress("mysqlcdc-1", 5, 1.0, 10, 100, AT, 1700000000000, AT, [str(T)], {T.quoted: 7}, 12.5, 3),
    StagedRelease(2, 1.0),
    CheckpointIdentity("mysqlcdc-1", StreamOffset(AT, 0), 1.0),
    RunPlanProgress(2, 1.0, {str(T): "snapshot"}, [str(T), str(T)]),
    ChunkProgress("shop.orders chunk 1/2", str(T), 99, AT),
    ChunkResult(str(T), [SPLIT], 99, 3, 2.5, "shop.orders chunk 1/2"),
    CollectResult("/state", 2, [str(T)], 1, 1, ["shop.gone"], AT),
    StreamResult("available-now", 12, "mysqlcdc-1", 3.5, 4, StreamOffset(AT, 2), {T.quoted: 12}),
    ChunkJob(str(T), [SPLIT.split], SinkSpec("/lake"), 2, (5400, 5499), "/state/staged/x", 60.0,
             ServerHistory((ServerEpoch(0, 1, None, "x"),))),
    StreamJob("/state", SinkSpec("/lake"), mode="continuous", on_binlog_purged="resnapshot", max_batch_events=10,
              holder="Airflow task d.stream of run r, try 1", report="/state/runs/r/spark/stream--1-1", lease_ttl_s=30,
              table_patterns=["shop.order_\\d+"], exclude_tables=["`shop`.`order_9`"]),
    NewTables((NewTable(T.quoted, AT, "CREATE TABLE orders (id INT PRIMARY KEY)", 1.0),)),
    StreamLease(3, "f00d", "Airflow task d.stream of run r, try 1", "worker-1", 4242, 1.0, 60.0, "/state/runs/r/x"),
    LeaseHeartbeat("f00d", 2.0, False, "app-1", "http://worker-1:4040"),
    StopRequest("its Airflow task was marked failed", 3.0),
    StreamStatus(StreamPhase.FINISHED, "the stream ended", {"record": "stream-result"}),
    DetachedStreamRef("/state/runs/r/spark/stream--1-1", 1.5),
    RememberedSchema(TableSchema(T, (Column("id", "int", "int(11)", False), Column("v", "decimal", "decimal(10,2)", True)),
                                 ("id",))),
    StreamOffset(AT.in_epoch(2), 3),
    ServerHistory((ServerEpoch(0, 1, None, "2026-11-23T00:00:00+00:00"), ServerEpoch(1, 2, "0-1-42", "x"))),
    ChunkPlan("shop.orders chunk 1/2", T, (SPLIT.split,)),
    SinkSpec("s3://b/lake", "iceberg", "lake_{database}", "lake_catalog"),
    # a column rule travels with the plan, the job, the registry and the remembered schema
    ChunkPlan("shop.orders chunk 1/2", T, (SPLIT.split,), RULE),
    ChunkJob(str(T), [SPLIT.split], SinkSpec("/lake"), table_rule=RULE),
    ChunkJob(str(T), [SPLIT.split], SinkSpec("/lake"), snapshot_consistency="at-least-once"),
    Generation(3, {T: CapturedTable("id", [SPLIT], RULE)}, {T}, "2026-11-23T00:00:00+00:00"),
    RememberedSchema(TableSchema(T, (Column("id", "int", "int(11)", False), Column("e", "varchar", "varchar(9)", True,
                                                                                  mask="hash")), ("id",), (), RULE)),
    TablePlans(True, [TablePlan(T, "id", PlanAction.RESNAPSHOT, [SPLIT.split], table_rule=RULE)], 2),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_through_json_in_its_envelope(record):
    data = json.loads(json.dumps(encode(record)))
    assert data["record"] == type(record).FORMAT.kind and data["format_version"] == type(record).FORMAT.version
    again = decode(type(record), data, "here")
    assert again == record
    if isinstance(record, (StreamOffset, StreamOffsetProgress)):  # offsets compare by position: check identity too
        offset = again if isinstance(again, StreamOffset) else again.offset
        assert (offset.offset.gtid_set, offset.offset.server_id) == (AT.gtid_set, AT.server_id)
        assert offset.offset.epoch == record.offset.epoch if isinstance(record, StreamOffset) else True


def test_a_record_of_a_newer_format_version_is_refused_naming_the_file_and_the_fix():
    data = {**encode(RECORDS[1]), "format_version": Generation.FORMAT.version + 1}
    with pytest.raises(ProtocolVersionError, match=r"generations/000002.json is a registry-generation record of "
                                                   r"format version 4, .*reads versions up to 3.*Install that version"):
        decode(Generation, data, "generations/000002.json")


def test_a_record_of_another_kind_is_refused():
    with pytest.raises(ProtocolError, match="'stream-offset' record where a 'registry-generation' record belongs"):
        decode(Generation, encode(RECORDS[0]), "generations/000002.json")


def test_a_malformed_record_names_the_place_and_the_field():
    with pytest.raises(ProtocolError, match="stream.json: malformed stream-batch-progress record .*batch"):
        decode(StreamBatchProgress, {"record": "stream-batch-progress", "format_version": 1}, "stream.json")


def test_an_unknown_table_event_kind_is_a_protocol_error_not_a_crash():
    data = encode(RECORDS[2])
    data["tables"][T.quoted][0]["kind"] = "exploded"
    with pytest.raises(ProtocolError, match="unknown table event kind 'exploded'"):
        decode(DriftLog, data, "schema-drift.json")


def test_records_written_before_the_envelope_read_as_version_0():
    legacy_split = {"split": SPLIT.split.to_dict(), "high_watermark": AT.to_dict(), "low_watermark": None, "rows": 99,
                    "binlog_events_merged": 3, "extra": {"staged": "file:///s.parquet", "partitions": 2, "seconds": 1.5}}
    generation = decode(Generation, {"number": 2, "created": "", "tables": {T.quoted: {"chunk_key": "id", "splits": [
        legacy_split]}}, "history": [T.quoted]}, "generations/000002.json")
    split = generation.tables[T].splits[0]
    assert (split.staged, split.partitions, split.seconds, split.stream_only) == ("file:///s.parquet", 2, 1.5, False)
    offset = StreamOffset.from_spark({"file": "binlog.000007", "pos": 1234, "gen": 3, "gtid": "0-1-42", "server_id": 1})
    assert offset == StreamOffset(AT, 3) and offset.offset.gtid_set == "0-1-42"
    drift_v2 = {"format": 2, "tables": {T.quoted: [RECORDS[2].tables[T][0].to_dict()]}}
    assert decode(DriftLog, drift_v2, "schema-drift.json") == RECORDS[2]
    drift_v1 = {"shop.orders": {"offset": AT.to_dict(), "reason": "column dropped"}}
    assert decode(DriftLog, drift_v1, "schema-drift.json").tables[T][0].kind is TableEventKind.ALTERED


def test_the_state_location_refuses_a_newer_drift_file_before_anything_is_written(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    state.storage.write_text(json.dumps({"record": "schema-drift", "format_version": 99, "tables": {}}), "progress", DRIFT)
    with pytest.raises(ProtocolVersionError, match=r"progress/schema-drift.json is a schema-drift record of format "
                                                   r"version 99"):
        read_drift(state)


def test_the_registry_writes_generations_in_their_envelope(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    state.commit({T: CapturedTable("id", [SPLIT])})
    data = json.loads((tmp_path / "state" / GENERATIONS / "000001.json").read_text())
    assert (data["record"], data["format_version"]) == ("registry-generation", 3)
    assert state.latest().tables[T].splits == [SPLIT]


def test_a_plan_action_outside_the_vocabulary_is_refused_by_name():
    from airflow_provider_mysqlcdc.protocol.plans import TablePlan

    plan = TablePlan(T, "id", PlanAction.SNAPSHOT).to_dict()
    assert plan["action"] == "snapshot" and TablePlan.from_dict(plan).action is PlanAction.SNAPSHOT
    with pytest.raises(ProtocolError, match="unknown plan action 'snapshot-all'"):
        TablePlan.from_dict({**plan, "action": "snapshot-all"})


def test_a_job_file_from_a_newer_provider_is_refused_before_the_job_starts():
    job = next(r for r in RECORDS if isinstance(r, StreamJob))
    text = json.dumps({**encode(job), "format_version": StreamJob.FORMAT.version + 1})
    with pytest.raises(ProtocolVersionError, match="the stream-job file is a stream-job record of format version "
                                                   f"{StreamJob.FORMAT.version + 1}"):
        StreamJob.from_json(text)


def _before_the_sink_spec(body: dict) -> dict:
    """A job file's body as a provider before the SinkSpec wrote it: the sink's loose fields."""
    sink = body.pop("sink")
    return {**body, "sink_root": sink["root"], "sink_format": sink["format"], "iceberg_namespace": sink["namespace"]}


def test_a_stream_job_file_of_version_2_reads_with_the_default_clustering():
    body = {k: v for k, v in encode(StreamJob(state="/s", sink=SinkSpec("/l"))).items() if k != "cluster_after_files"}
    assert StreamJob.from_json(json.dumps({**_before_the_sink_spec(body), "format_version": 2})).cluster_after_files == 16


@pytest.mark.parametrize("job, version", [
    (StreamJob("/s", SinkSpec("/lake", "iceberg", "lake_{database}")), 7),
    (ChunkJob(str(T), [SPLIT.split], SinkSpec("/lake", "iceberg", "lake_{database}")), 5),
])
def test_a_job_file_written_before_the_sink_spec_reads_its_sink_from_the_loose_fields(job, version):
    body = _before_the_sink_spec(encode(job))
    assert type(job).from_json(json.dumps({**body, "format_version": version})).sink == job.sink


def test_a_chunk_from_before_the_envelope_reads_as_the_same_chunk():
    """An XCom a plan task of an earlier version pushed (a plain dict) still maps a snapshot task."""
    chunk = ChunkPlan("shop.orders chunk 1/1", T, (SPLIT.split,))
    plain = {"label": chunk.label, "table": T.quoted, "splits": [SPLIT.split.to_dict()]}
    assert decode(ChunkPlan, plain, "the chunk argument") == chunk and chunk.chunk_key == SPLIT.split.chunk_key


def test_a_chunk_job_of_an_unknown_snapshot_consistency_is_refused_naming_the_choices():
    with pytest.raises(ConfigurationError, match="snapshot_consistency must be one of exactly-once, at-least-once, "
                                                 "got 'eventually'"):
        ChunkJob(str(T), [SPLIT.split], SinkSpec("/lake"), snapshot_consistency="eventually")


def test_a_chunk_job_file_of_version_2_reads_as_exactly_once():
    body = {k: v for k, v in encode(ChunkJob(str(T), [SPLIT.split], SinkSpec("/lake"))).items() if k != "snapshot_consistency"}
    job = ChunkJob.from_json(json.dumps({**_before_the_sink_spec(body), "format_version": 2}))
    assert job.snapshot_consistency == "exactly-once" and job.replays_windows


def test_a_stream_without_a_chosen_engine_runs_on_the_driver_but_on_spark_connect():
    from airflow_provider_mysqlcdc.protocol.jobs import DRIVER, STRUCTURED_STREAMING, stream_engine_of

    job = StreamJob.from_json(StreamJob(state="/s", sink=SinkSpec("/lake")).to_json())
    assert job.stream_engine is None
    assert stream_engine_of(job.stream_engine, spark_connect=False) == DRIVER
    assert stream_engine_of(job.stream_engine, spark_connect=True) == STRUCTURED_STREAMING
    for chosen in (DRIVER, STRUCTURED_STREAMING):  # a chosen engine is kept wherever the stream runs
        assert stream_engine_of(chosen, spark_connect=True) == stream_engine_of(chosen, spark_connect=False) == chosen


def test_a_stream_job_of_an_unknown_engine_is_refused_naming_the_engines():
    with pytest.raises(ConfigurationError, match="structured-streaming, driver.*'spark'"):
        StreamJob(state="/s", sink=SinkSpec("/lake"), stream_engine="spark")
