"""The stream's identity in its checkpoint: a new checkpoint fixes where its first batch starts; the
driver loop's app id and first batch."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
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



def test_the_driver_loop_removes_what_structured_streaming_left_and_a_later_query_finds_a_new_checkpoint(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    stream_identity(str(checkpoint), lambda: _at("binlog.000001", 4))
    (checkpoint / "offsets").mkdir()
    (checkpoint / "offsets" / "7").write_text("v1")

    app_id, first_batch = driver_identity(str(checkpoint))

    assert list(checkpoint.iterdir()) == [] and first_batch == 0
    later = stream_identity(str(checkpoint), lambda: _at("binlog.000009", 4))  # the loop's end, resume_offset's
    assert later.new and later.initial_offset == _at("binlog.000009", 4) and later.app_id != app_id


def test_each_driver_loop_run_takes_a_new_app_id_so_no_batch_id_is_one_a_table_may_hold(tmp_path):
    """A run killed between its commits and its record leaves tables holding batches of its app id."""
    checkpoint = str(tmp_path / "checkpoint")
    runs = [driver_identity(checkpoint) for _ in range(3)]
    assert len({app for app, _ in runs}) == 3 and {first for _, first in runs} == {0}
    assert driver_identity(checkpoint, "mysqlcdc-named") == ("mysqlcdc-named", 0)  # the job's own, kept
