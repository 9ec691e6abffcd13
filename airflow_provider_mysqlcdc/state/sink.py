"""The sink a pipeline writes, recorded in its state location (``sink.json``) at its first run.

A pipeline's tables live in the sink they were captured into: a later run, a stream started by
hand or the maintenance DAG that named another format, namespace, catalog or root would write
(or maintain) tables that hold none of the pipeline's rows. So the first task that runs records its
``SinkSpec`` (put-if-absent, so two tasks of the first run agree), every later task compares its own
with it, and the maintenance task takes it from here when it names none. A stream checks besides that
the sink holds the tables the pipeline captured into it (``refuse_missing_sink_tables``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.routing import captured_target
from airflow_provider_mysqlcdc.state.registry import PipelineState

SINK = "sink.json"


def recorded_sink(state: PipelineState) -> SinkSpec | None:
    """The pipeline's sink, None before its first run recorded one."""
    return state.storage.read_record(SinkSpec, SINK)


def settle_sink(state: PipelineState, spec: SinkSpec, *, outside_airflow: bool = False) -> SinkSpec:
    """The pipeline's sink: ``spec``, recorded now when the pipeline has none yet; the recorded one
    (with ``spec``'s merge mode, which each run may change) when ``spec`` agrees with it; refused,
    before anything is written, when it does not.

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
        spec = replace(spec, catalog_conn_id=recorded.catalog_conn_id)
    refuse_another_sink(state, recorded, spec)
    return replace(recorded, merge_mode=spec.merge_mode, table_merge_modes=spec.table_merge_modes)  # each run's own


def refuse_another_sink(state: PipelineState, recorded: SinkSpec, spec: SinkSpec) -> None:
    differences = recorded.differences(spec)
    if differences:
        raise ConfigurationError(
            f"The pipeline at {state.location} writes the sink recorded at its first run ({recorded.describe()}), "
            f"but this task names another: {'; '.join(differences)} (the pipeline's first, this task's second). "
            "A pipeline's tables stay in the sink they were captured into: give this task the pipeline's "
            "settings. To move the pipeline to another sink, give it a new state location (state_dir), whose "
            "first run snapshots every table into the new sink.")


def refuse_missing_sink_tables(tables: Mapping[TableId, CapturedTable], sink: Sink) -> None:
    """Of ``tables`` (captured, as the registry holds them), those whose snapshot was written into the sink (not staged for the
    stream to apply, not streamed without one) must have their sink table: a stream would otherwise
    fill a new, empty table with later changes only. It is missing when the sink changed under the
    pipeline (another ``sink_format``, ``sink_root`` or ``iceberg_namespace`` than the tables were
    captured into) or the table was deleted."""
    missing = []
    for table_id, entry in tables.items():
        if entry.stream_only or any(f.staged for f in entry.splits):
            continue
        target = captured_target(table_id, entry.table_rule)
        if not sink.column_names(target.table_id):
            missing.append(table_id)
    if missing:
        names = [str(t) for t in missing]
        raise ConfigurationError(
            f"The sink tables of {len(names)} captured table(s) are not in this sink ({type(sink).__name__} at "
            f"{sink.root}): {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}. The pipeline wrote them into "
            "another sink (its sink_format, sink_root or iceberg_namespace changed since), or they were deleted. Go back "
            "to the sink they were captured into, or re-snapshot them into this one (trigger a run with "
            f'{{"resnapshot": {json.dumps(names[:3])}}}), or start a new pipeline (a new state location).')
