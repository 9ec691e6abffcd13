"""The stream's identity in its checkpoint: a new checkpoint fixes where its first batch starts."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.stream.identity import stream_identity


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

