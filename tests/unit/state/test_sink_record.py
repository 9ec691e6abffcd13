"""The pipeline's sink recorded in its state location (state/sink.py): recorded by the first task
that names one, read back by the later ones, another one refused naming both and the way out."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.sink import recorded_sink, settle_sink

SPEC = SinkSpec("/lake", "iceberg", "lake_{database}", "lake_catalog")


def test_the_first_task_records_its_sink(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    assert recorded_sink(state) is None
    assert settle_sink(state, SPEC) == SPEC
    assert recorded_sink(PipelineState(state.location)) == SPEC


def test_a_later_task_naming_the_same_sink_gets_the_recorded_one(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    settle_sink(state, SPEC)
    assert settle_sink(state, SinkSpec("/lake/", "iceberg", "lake_{database}", "lake_catalog")) == SPEC


@pytest.mark.parametrize("other, named", [
    (SinkSpec("/lake", "delta", "lake_{database}", "lake_catalog"), "sink_format 'iceberg' != 'delta'"),
    (SinkSpec("/other", "iceberg", "lake_{database}", "lake_catalog"), "sink_root '/lake' != '/other'"),
    (SinkSpec("/lake", "iceberg", "{database}", "lake_catalog"), "iceberg_namespace 'lake_{database}' != '{database}'"),
    (SinkSpec("/lake", "iceberg", "lake_{database}", None), "iceberg_catalog_conn_id 'lake_catalog' != None"),
])
def test_another_sink_is_refused_naming_both_and_the_way_out(tmp_path, other, named):
    state = PipelineState(str(tmp_path / "state"))
    settle_sink(state, SPEC)
    with pytest.raises(ConfigurationError) as refused:
        settle_sink(state, other)
    assert named in str(refused.value) and "new state location" in str(refused.value)
    assert recorded_sink(state) == SPEC  # the record stays as the first run wrote it


def test_two_first_tasks_at_once_agree_on_one_record(tmp_path, monkeypatch):
    """The first run's mapped chunk tasks race to record the sink: the one that loses reads the winner's."""
    state = PipelineState(str(tmp_path / "state"))
    other = PipelineState(state.location)
    reads = iter([None])
    real = recorded_sink.__globals__["recorded_sink"]
    monkeypatch.setitem(settle_sink.__globals__, "recorded_sink",
                        lambda s: next(reads, real(s)) if s is state else real(s))
    settle_sink(other, SPEC)  # wins while ``state`` still saw no record
    with pytest.raises(ConfigurationError, match="sink_format 'iceberg' != 'delta'"):
        settle_sink(state, SinkSpec("/lake", "delta", "lake_{database}", "lake_catalog"))


def test_a_spark_program_started_by_hand_agrees_without_naming_the_catalog_connection(tmp_path):
    """A stream started outside Airflow cannot name a connection: its caller installed the catalog's
    properties. Its spec agrees with the recorded one on everything else, and is refused on the rest."""
    state = PipelineState(str(tmp_path / "state"))
    settle_sink(state, SPEC)
    by_hand = SinkSpec("/lake", "iceberg", "lake_{database}")
    assert settle_sink(state, by_hand, outside_airflow=True) == SPEC
    with pytest.raises(ConfigurationError, match="iceberg_catalog_conn_id 'lake_catalog' != None"):
        settle_sink(state, by_hand)
    with pytest.raises(ConfigurationError, match="sink_format 'iceberg' != 'delta'"):
        settle_sink(state, SinkSpec("/lake", "delta", "lake_{database}"), outside_airflow=True)


def test_a_later_run_may_change_the_merge_mode_alone_and_gets_its_own(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    settle_sink(state, SinkSpec("/lake", "delta", merge_mode="copy-on-write"))
    assert settle_sink(state, SinkSpec("/lake", "delta", merge_mode="merge-on-read")).merge_mode == "merge-on-read"
    assert recorded_sink(state).merge_mode == "copy-on-write"  # the record names the sink, not how it is merged


def test_a_later_run_may_change_the_tables_merge_modes_and_gets_its_own(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    settle_sink(state, SinkSpec("/lake", "delta", table_merge_modes={"shop.a": "copy-on-write"}))
    settled = settle_sink(state, SinkSpec("/lake", "delta", table_merge_modes={"shop.b": "copy-on-write"}))
    assert settled.table_merge_modes == (("shop.b", "copy-on-write"),)
