"""The stream's identity in its checkpoint: a new checkpoint fixes where its first batch starts; the
driver loop's app id and first batch."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.progress import StreamBatchProgress
from airflow_provider_mysqlcdc.state.registry import STREAM_PROGRESS, PipelineState
from airflow_provider_mysqlcdc.stream.identity import driver_identity, stream_identity


@pytest.fixture(autouse=True)
def sink_format():
    """Once, not per sink variant (tests/unit/stream/conftest.py): no sink here."""
    return "delta"


def _at(file: str, position: int) -> StreamOffset:
    return StreamOffset(BinlogOffset(file, position), 0)


def test_a_new_checkpoint_records_its_first_offset_once(tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    first = stream_identity(checkpoint, lambda: _at("binlog.000004", 214315))
    # Spark runs an uncommitted batch 0 again after a restart: it must start where it started, even
    # though the registry's smallest high watermark has moved meanwhile
    again = stream_identity(checkpoint, lambda: _at("binlog.000008", 923097))
    assert first.new and not again.new
    assert again.app_id == first.app_id
    assert again.initial_offset == first.initial_offset == _at("binlog.000004", 214315)


def test_a_deleted_checkpoint_gets_a_new_identity(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    first = stream_identity(str(checkpoint), lambda: _at("binlog.000001", 4))
    (checkpoint / "mysqlcdc-stream.json").unlink()
    assert stream_identity(str(checkpoint), lambda: _at("binlog.000001", 4)).app_id != first.app_id


def test_a_checkpoint_spark_already_wrote_offsets_to_is_not_new(tmp_path):
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text("v1")
    identity = stream_identity(str(tmp_path / "checkpoint"), lambda: _at("binlog.000001", 4))
    assert not identity.new and identity.initial_offset is None



def _record_batch(state: PipelineState, app_id: str, batch: int) -> None:
    state.write_progress(STREAM_PROGRESS, StreamBatchProgress(app_id, batch, 0.0, 0, 0, None, None, None, []))


def test_the_driver_loop_removes_what_structured_streaming_left_and_a_later_query_finds_a_new_checkpoint(tmp_path):
    checkpoint, state = tmp_path / "checkpoint", PipelineState(str(tmp_path / "state"))
    stream_identity(str(checkpoint), lambda: _at("binlog.000001", 4))
    (checkpoint / "offsets").mkdir()
    (checkpoint / "offsets" / "7").write_text("v1")

    app_id, first_batch = driver_identity(str(checkpoint), state)

    assert [p.name for p in checkpoint.iterdir()] == ["mysqlcdc-driver.json"] and first_batch == 0
    later = stream_identity(str(checkpoint), lambda: _at("binlog.000009", 4))  # the loop's end, resume_offset's
    assert later.new and later.initial_offset == _at("binlog.000009", 4) and later.app_id != app_id


def test_the_driver_loops_first_batch_is_past_any_a_table_may_hold(tmp_path):
    """A table may hold the batch after the last one recorded (a kill -9 between its commits and its record)."""
    checkpoint, state = str(tmp_path / "checkpoint"), PipelineState(str(tmp_path / "state"))
    app_id, _ = driver_identity(checkpoint, state)
    _record_batch(state, app_id, 41)

    assert driver_identity(checkpoint, state) == (app_id, 43)


def test_a_driver_loop_whose_last_recorded_batch_is_another_streams_takes_a_new_app_id(tmp_path):
    checkpoint, state = str(tmp_path / "checkpoint"), PipelineState(str(tmp_path / "state"))
    app_id, _ = driver_identity(checkpoint, state)
    _record_batch(state, "mysqlcdc-another", 5)

    again, first_batch = driver_identity(checkpoint, state)
    assert again not in (app_id, "mysqlcdc-another") and first_batch == 0
    # none of its batches recorded yet (a table may hold its batch 0): a new one again
    assert driver_identity(checkpoint, state)[0] not in (again, app_id)
