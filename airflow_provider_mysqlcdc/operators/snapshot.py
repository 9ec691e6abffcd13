"""``MySqlCdcSnapshotOperator``: the operator DAG authors see once per chunk (it is mapped).

One run of ``spark/jobs/snapshot_chunk.py`` (submitted with the Spark provider's hook, client or
cluster deploy mode: hooks/spark.py) reads a few consecutive splits of one table and returns the
finished splits with their high watermarks through XCom (the job reports them through its report
folder in the state location). Clearing one of its task instances re-reads
exactly that chunk. A table no stream has ever captured is written to the sink directly; for any
other table the rows are staged for the stream to apply (state/registry.py), so that a re-run
chunk can never take the sink back in time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from airflow.sdk import Context

from airflow_provider_mysqlcdc.assets.sink_tables import TableChanged, emit_table_events
from airflow_provider_mysqlcdc.metrics.pipeline_metrics import PipelineMetrics, pipeline_name
from airflow_provider_mysqlcdc.operators.arguments import state_location_of
from airflow_provider_mysqlcdc.operators.spark_job import MySqlCdcSparkJobOperator
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob, check_snapshot_consistency
from airflow_provider_mysqlcdc.protocol.plans import ChunkPlan
from airflow_provider_mysqlcdc.protocol.progress import ChunkProgress, RunPlanProgress
from airflow_provider_mysqlcdc.protocol.results import ChunkResult
from airflow_provider_mysqlcdc.sinks.routing import sink_table_id
from airflow_provider_mysqlcdc.state.registry import PipelineState, run_folder


class MySqlCdcSnapshotOperator(MySqlCdcSparkJobOperator):
    """One chunk of one table: a run of the chunk job, returning its finished splits.

    :param chunk: one item of the plan task's return value, a ``ChunkPlan`` record (protocol/plans.py);
        mapped over them
    :param sink_root: where the sink tables live (Delta tables, an Iceberg table's data unless its catalog places it)
    :param state_location: the pipeline's state location; a table it captured already is staged there
    :param mysqlcdc_conn_id: the ``mysqlcdc`` connection of the source (its ``retry_budget_s`` applies)
    :param spark_master: Spark master when no ``spark_conn_id`` is given
    :param spark_conn_id: an Airflow ``spark`` connection to submit through (hooks/spark.py)
    :param spark_conf: extra Spark configuration (no secrets)
    :param partitions_per_split: Spark partitions reading one split (0: Spark's default parallelism)
    :param snapshot_consistency: ``exactly-once`` (default: each split's binlog window is merged into
        its rows) or ``at-least-once`` (no window is read: the stream applies the split's changes from
        its low watermark on, some of them a second time; docs/cdc-semantics.md)
    """

    template_fields: Sequence[str] = ("chunk", "sink_root", "state_location", "spark_master", "spark_conn_id",
                                      "spark_conf", "snapshot_consistency")

    def __init__(self, *, chunk: dict[str, Any], state_location: str | None = None,
                 state: str | None = None, partitions_per_split: int = 0,
                 snapshot_consistency: str = "exactly-once", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.chunk = chunk
        self.state_location = state_location_of(state_location, state, "MySqlCdcSnapshotOperator")
        self.partitions_per_split = partitions_per_split
        if "{{" not in snapshot_consistency:  # a literal is refused when the DAG is parsed
            check_snapshot_consistency(snapshot_consistency)
        self.snapshot_consistency = snapshot_consistency
        self._rows_written: int | None = None  # into the sink table, once done (None: staged, or not done)

    def execute(self, context: Context) -> dict[str, Any]:
        self.object_store  # noqa: B018 - installed before the state location and the lake are touched
        chunk = self._chunk()
        table_id = chunk.table_id
        state = PipelineState(self.state_location)
        sink = self.pipeline_sink(state)  # another sink than the pipeline's is refused before anything runs
        hook = self.hook
        stage_to = state.staging_url(table_id) if state.needs_staging(table_id) else None
        job = ChunkJob(table=table_id.quoted, splits=list(chunk.splits),
                       sink=sink, partitions_per_split=self.partitions_per_split,
                       server_id_range=hook.server_id_range(), stage_to=stage_to, retry_budget_s=hook.retry_budget_s(),
                       servers=state.servers(), table_rule=chunk.table_rule,
                       snapshot_consistency=self.snapshot_consistency)
        self.log.info("snapshot %s: %d split(s)%s", chunk.label, len(chunk.splits),
                      "; captured before, so staged for the stream" if stage_to else "")
        output = self.run_spark_program("snapshot_chunk.py", job.to_json(), state, context)
        result = replace(decode(ChunkResult, output, f"the result of chunk {chunk.label}"), label=chunk.label)
        self.log.info("snapshot %s done: %d rows, %d binlog changes merged, %.1fs", chunk.label, result.rows,
                      result.binlog_events_merged, result.seconds)
        self._record_progress(state, context, result)
        PipelineMetrics(pipeline_name(self.state_location)).chunk_done(table_id, result.rows, result.seconds)
        if stage_to is None:  # written to the sink table now (staged rows change it when the stream applies them)
            self._rows_written = result.rows
            emit_table_events(self.outlets, context, self.sink_root, [TableChanged(
                sink_table_id(table_id, chunk.table_rule), "snapshot", result.rows, result.high_watermark,
                state.latest_number())])
        return encode(result)

    def _chunk(self) -> ChunkPlan:
        """The (rendered) ``chunk`` argument: a ``ChunkPlan`` record, or its JSON text."""
        return decode(ChunkPlan, self.chunk if isinstance(self.chunk, dict) else json.loads(self.chunk),
                      f"the chunk argument of {self.task_id}")

    def get_openlineage_facets_on_start(self) -> Any:
        """The chunk's source table as input, its Delta table as output (lineage/openlineage.py)."""
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """As on start, with the rows the chunk wrote as the output's statistics (staged rows are the
        stream's to write)."""
        return self._lineage(self._rows_written)

    def _lineage(self, rows: int | None) -> Any:
        chunk = self._chunk()
        return self.source_lineage(PipelineState(self.state_location), {chunk.table_id: chunk.chunk_key},
                                   None if rows is None else {chunk.table_id: rows})

    def _record_progress(self, state: PipelineState, context: Context, result: ChunkResult) -> None:
        """One file per chunk (mapped tasks run concurrently), read back for 'chunks done of total'."""
        folder = run_folder(context["run_id"])
        state.write_progress(f"{folder}/chunk-{self.task_id}-{context['ti'].map_index}.json",
                             ChunkProgress(result.label, result.table, result.rows, result.high_watermark))
        names = state.storage.list_names("progress", folder)
        plans = [state.read_progress(RunPlanProgress, f"{folder}/{n}") for n in names if n.startswith("plan-")]
        planned = sum(plan.chunks for plan in plans if plan is not None)
        done = len([n for n in names if n.startswith("chunk-") and n.endswith(".json")])
        self.log.info("snapshot progress of this run: %d of %d chunk(s) done", done, planned)
