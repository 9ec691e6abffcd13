"""The sink a pipeline writes, recorded in its state location (``sink.json``) at its first run.

A pipeline's tables live in the sink they were captured into: a later run, a stream started by
hand or the maintenance DAG that named another format, namespace, catalog or root would write
(or maintain) tables that hold none of the pipeline's rows. So the first task that runs records its
``SinkSpec`` (put-if-absent, so two tasks of the first run agree), every later task compares its own
with it, and the maintenance task takes it from here when it names none.
"""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState

SINK = "sink.json"


def recorded_sink(state: PipelineState) -> SinkSpec | None:
    """The pipeline's sink, None before its first run recorded one."""
    return state.storage.read_record(SinkSpec, SINK)


def settle_sink(state: PipelineState, spec: SinkSpec, *, outside_airflow: bool = False) -> SinkSpec:
    """The pipeline's sink: ``spec``, recorded now when the pipeline has none yet; the recorded one
    when ``spec`` agrees with it; refused, before anything is written, when it does not.

    ``outside_airflow``: ``spec`` is a Spark program's, which may have been started by hand: it cannot
    name an Airflow connection (its caller installed the catalog's properties, if any), so a spec
    without a catalog connection agrees with a recorded one that has one."""
    recorded = recorded_sink(state)
    if recorded is None:
        if state.storage.create_record(spec, SINK, indent=1):
            return spec
        recorded = recorded_sink(state)  # another task of the first run recorded it meanwhile
        assert recorded is not None
    if outside_airflow and spec.catalog_conn_id is None:
        spec = SinkSpec(spec.root, spec.format, spec.namespace, recorded.catalog_conn_id)
    refuse_another_sink(state, recorded, spec)
    return recorded


def refuse_another_sink(state: PipelineState, recorded: SinkSpec, spec: SinkSpec) -> None:
    differences = recorded.differences(spec)
    if differences:
        raise ConfigurationError(
            f"The pipeline at {state.location} writes the sink recorded at its first run ({recorded.describe()}), "
            f"but this task names another: {'; '.join(differences)} (the pipeline's first, this task's second). "
            "A pipeline's tables stay in the sink they were captured into: give this task the pipeline's "
            "settings. To move the pipeline to another sink, give it a new state location (state_dir), whose "
            "first run snapshots every table into the new sink.")
