"""The stream's identity in its checkpoint: a new checkpoint fixes where its first batch starts."""

from __future__ import annotations

from airflow_provider_mysqlcdc.spark.stream_job import stream_identity


def test_a_new_checkpoint_records_its_first_offset_once(tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    first = stream_identity(checkpoint, lambda: {"file": "binlog.000004", "pos": 214315, "gen": 0})
    # Spark runs an uncommitted batch 0 again after a restart: it must start where it started, even
    # though the registry's smallest high watermark has moved meanwhile
    again = stream_identity(checkpoint, lambda: {"file": "binlog.000008", "pos": 923097, "gen": 0})
    assert first.new and not again.new
    assert again.app_id == first.app_id
    assert again.initial_offset == first.initial_offset == {"file": "binlog.000004", "pos": 214315, "gen": 0}


def test_a_deleted_checkpoint_gets_a_new_identity(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    first = stream_identity(str(checkpoint), lambda: {"file": "binlog.000001", "pos": 4, "gen": 0})
    (checkpoint / "mysqlcdc-stream.json").unlink()
    assert stream_identity(str(checkpoint), lambda: {"file": "binlog.000001", "pos": 4, "gen": 0}).app_id != first.app_id


def test_a_checkpoint_spark_already_wrote_offsets_to_is_not_new(tmp_path):
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text("v1")
    identity = stream_identity(str(tmp_path / "checkpoint"), lambda: {"file": "binlog.000001", "pos": 4, "gen": 0})
    assert not identity.new and identity.initial_offset is None

