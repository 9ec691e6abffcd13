"""``MySqlCdcStreamOperator``: runs the binlog stream job over the pipeline's registry.

``available-now`` (the default) catches up to the binlog head as of the task's start and finishes,
which suits scheduled runs: each DAG run advances the sink, and the checkpoint makes the next one
continue exactly where this one stopped. ``continuous`` runs until it is stopped; choose it deliberately, e.g. in a DAG of its own with
``max_active_runs=1``. ``skip`` runs nothing: a continuous stream elsewhere picks up what this run
registered at its next micro-batch.

A continuous stream runs detached from the task: a worker that crashes does not take it along.
Without deferral the task follows it (``ResumableJobMixin``, as ``SparkSubmitOperator`` does): the
stream's report folder is kept in the task state store, so the retry after a worker crash
reconnects to the running stream instead of starting another. With ``deferrable=True`` the task
defers to ``MySqlCdcStreamTrigger``, which watches it from the triggerer (no worker slot is held).
Either way the task fails with the stream's own error if it dies, and marking the task failed or
clearing it stops the stream.

Whatever starts it, a stream holds the pipeline's lease (state/lease.py): a second stream on the
same pipeline fails at its start, naming the one that runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk import Context, ResumableJobMixin, conf

from airflow_provider_mysqlcdc.assets.sink_tables import TableChanged, emit_table_events
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, SparkJobFailed
from airflow_provider_mysqlcdc.cdc.model.records import ON_BINLOG_PURGED
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.hooks.spark import checked_spark_conf
from airflow_provider_mysqlcdc.launch.supervision import DetachedStream, wait_for_a_stopping_stream
from airflow_provider_mysqlcdc.metrics.pipeline_metrics import StreamMetricsFollower
from airflow_provider_mysqlcdc.operators.arguments import state_location_of, table_entries, table_patterns
from airflow_provider_mysqlcdc.operators.spark_job import MySqlCdcSparkJobOperator
from airflow_provider_mysqlcdc.protocol.actions import StreamMode
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.jobs import (
    STREAM_ENGINES,
    StreamJob,
    check_heartbeat,
    check_schema_change_policy,
)
from airflow_provider_mysqlcdc.protocol.results import DetachedStreamRef, StreamPhase, StreamResult, StreamStatus
from airflow_provider_mysqlcdc.sinks.routing import sink_table_id
from airflow_provider_mysqlcdc.spark.report import ReportWatcher
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.triggers.stream import STOP_REASON, MySqlCdcStreamTrigger

STREAM_MODES = (*(m.value for m in StreamMode), "skip")
#: what a retry finds of a stream its task asked to stop (marked failed, cleared, timed out): neither
#: running nor done, so ResumableJobMixin starts a new one instead of reconnecting to it
STOPPED_BY_ITS_TASK = "stopped-by-its-task"


class MySqlCdcStreamOperator(ResumableJobMixin, MySqlCdcSparkJobOperator):
    """The binlog stream into the sink (see the module doc for the modes).

    :param state_location: the pipeline's state location (``<state_dir>/<dag_id>``)
    :param sink_root: where the sink tables live (Delta tables, an Iceberg table's data unless its catalog places it)
    :param mode: ``available-now``, ``continuous`` or ``skip``
    :param mysqlcdc_conn_id: the ``mysqlcdc`` connection of the source
    :param spark_master: Spark master when no ``spark_conn_id`` is given
    :param spark_conn_id: an Airflow ``spark`` connection to submit through (hooks/spark.py)
    :param spark_conf: extra Spark configuration (no secrets)
    :param trigger_interval_s: micro-batch interval in ``continuous`` mode
    :param changelog: also append every change to ``<table>__changelog``
    :param on_binlog_purged: binlog the stream needs was purged: ``fail`` (the default, with the way
        out) or ``resnapshot`` (record exactly the tables that needed it; the next DAG run
        re-snapshots them, as Debezium's ``when_needed`` does)
    :param max_batch_bytes: a micro-batch ends at the first transaction end after this much binlog
        (default 128 MiB; 0: no limit); a larger transaction makes a batch of its own
    :param max_batch_events: the same in binlog events (default: no limit)
    :param durable: a retry reconnects to the running continuous stream (``ResumableJobMixin``)
    :param max_apply_changes: changes merged per commit (default 100,000): a larger batch, one huge
        transaction too, is merged in pieces, each recording its binlog position (so memory stays
        bounded and a restart resumes exactly; readers may see such a transaction in pieces)
    :param cluster_after_files: once a table's merges have left this many data files to rewrite
        (default 16: files whose key ranges overlap, runs of small ones), the stream rewrites them in
        key order between two batches, so a merge keeps reading only the files its keys fall in (0: never)
    :param maintenance_every_s: also maintain every table (compaction, checkpoint, and vacuum when
        ``vacuum_retention_hours`` is given: sinks/delta/maintenance.py) every this many seconds, between two
        micro-batches (default: only when a ``MySqlCdcMaintenanceOperator`` asks)
    :param vacuum_retention_hours: the retention of the stream's own vacuum (default: no vacuum)
    :param deferrable: run a ``continuous`` stream detached and watch it from the triggerer (default:
        Airflow's ``[operators] default_deferrable``)
    :param poll_interval_s: how often the trigger looks at a detached stream
    :param table_patterns: the pipeline's table entries (names are left out): a table that is not
        captured and takes a name a pattern matches is recorded, and the next run captures it
        (state/new_tables.py)
    :param exclude_tables: names and patterns such tables never match
    :param schema_changes: what a DDL statement of a captured table does, as Flink CDC's
        ``schema.change.behavior``: ``evolve`` (the default: followed as docs/events-and-types.md says),
        ``lenient`` (a column change is never a re-snapshot: dropped columns stay, added ones older
        rows cannot get stay NULL), ``ignore`` (the sink keeps its columns) or ``fail`` (the stream
        stops before it, naming it; it goes on once run with another policy)
    :param heartbeat_interval_s: a running stream that finished no batch for this long records its
        position anyway, measured against the server's head, so lag and bytes behind stay true on a
        quiet source (default 30; 0: never; stream/heartbeat.py)
    :param heartbeat_query: a statement run on the source at each heartbeat (e.g. an upsert into a
        heartbeat table the CDC user may write), so a source that writes nothing else still moves
        the binlog on; checked (run once and rolled back) before the stream writes anything
    :param stream_engine: who runs the stream's batches: ``driver`` (the default: the stream job's
        driver reads and applies each batch itself, without a Spark job per batch: stream/loop.py) or
        ``structured-streaming`` (a Spark micro-batch per batch; the default on a Spark Connect
        session, whose batches then run on the server)
    """

    template_fields: Sequence[str] = ("state_location", "sink_root", "mode", "spark_master", "spark_conn_id",
                                      "spark_conf", "table_patterns", "exclude_tables")
    external_id_key = "mysqlcdc_stream"  # in the task state store: the detached stream a retry reconnects to
    _detached: DetachedStream | None = None
    _job: StreamJob
    _result: StreamResult | None = None

    def __init__(self, *, state_location: str | None = None, state: str | None = None,
                 mode: str = "available-now", trigger_interval_s: float = 1.0,
                 changelog: bool = False, on_binlog_purged: str = "fail", max_batch_bytes: int | None = None,
                 max_batch_events: int | None = None, max_apply_changes: int | None = None,
                 cluster_after_files: int | None = None, maintenance_every_s: float | None = None,
                 vacuum_retention_hours: float | None = None,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 poll_interval_s: float = 2.0, table_patterns: Any = None, exclude_tables: Any = None,
                 schema_changes: str = "evolve", heartbeat_interval_s: float | None = None,
                 heartbeat_query: str | None = None, stream_engine: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if stream_engine is not None and stream_engine not in STREAM_ENGINES:  # refused when the DAG is parsed
            raise ConfigurationError(f"stream_engine must be one of {', '.join(STREAM_ENGINES)}, got "
                                     f"{stream_engine!r}.")
        check_heartbeat(StreamJob.heartbeat_interval_s if heartbeat_interval_s is None else heartbeat_interval_s,
                        heartbeat_query or "")  # refused when the DAG is parsed
        self.schema_changes = check_schema_change_policy(schema_changes)  # refused when the DAG is parsed
        self.table_patterns = table_patterns
        self.exclude_tables = exclude_tables
        self.deferrable = deferrable
        self.poll_interval_s = poll_interval_s
        if on_binlog_purged not in ON_BINLOG_PURGED:
            raise ConfigurationError(f"on_binlog_purged must be one of {', '.join(ON_BINLOG_PURGED)}, got "
                                     f"{on_binlog_purged!r}.")
        self.on_binlog_purged = on_binlog_purged
        self.state_location = state_location_of(state_location, state, "MySqlCdcStreamOperator")
        self.mode = mode
        if isinstance(self.spark_conf, dict):  # refused at parse time when it is not a template
            checked_spark_conf(self.spark_conf)
        self.trigger_interval_s = trigger_interval_s
        self.changelog = changelog
        # None: the stream job's default (protocol/jobs.py), defined there once
        self.limits: dict[str, Any] = {name: value for name, value in (("max_batch_bytes", max_batch_bytes),
                                                       ("max_batch_events", max_batch_events),
                                                       ("max_apply_changes", max_apply_changes),
                                                       ("cluster_after_files", cluster_after_files),
                                                       ("maintenance_every_s", maintenance_every_s),
                                                       ("vacuum_retention_s", None if vacuum_retention_hours is None
                                                        else vacuum_retention_hours * 3600),
                                                       ("heartbeat_interval_s", heartbeat_interval_s),
                                                       ("heartbeat_query", heartbeat_query),
                                                       ("stream_engine", stream_engine))
                       if value is not None}

    def execute(self, context: Context) -> dict[str, Any]:
        if self.mode not in STREAM_MODES:
            raise ConfigurationError(f"stream mode must be one of {', '.join(STREAM_MODES)}, got {self.mode!r}")
        if self.mode == "skip":
            self.log.info("stream mode 'skip': a stream running elsewhere picks up this run's registry changes")
            return encode(StreamResult("skip"))
        self.object_store  # noqa: B018 - installed before the state location and the lake are touched
        state = PipelineState(self.state_location)
        sink = self.pipeline_sink(state)  # another sink than the pipeline's is refused before anything runs
        hook = self.hook
        low, high = hook.server_id_range()
        job = StreamJob(state=self.state_location, sink=sink, mode=self.mode,
                        trigger_interval_s=self.trigger_interval_s, server_id_range=f"{low}-{high}",
                        changelog=self.changelog, retry_budget_s=hook.retry_budget_s(),
                        on_binlog_purged=self.on_binlog_purged, holder=_holder(context),
                        table_patterns=table_patterns(self.table_patterns),
                        exclude_tables=table_entries(self.exclude_tables, "exclude_tables"),
                        schema_changes=self.schema_changes, **self.limits)
        if self.mode != StreamMode.CONTINUOUS.value:
            with StreamMetricsFollower(state, self.poll_interval_s):
                output = self.run_spark_program("binlog_stream.py", job.to_json(), state, context)
            return self._finished(output, context)
        self._job = job
        if not self.deferrable:  # a retry after a worker crash reconnects to the stream (submit_job below)
            try:
                with StreamMetricsFollower(state, self.poll_interval_s):
                    return self.execute_resumable(context)
            except BaseException:  # a task that ends, however, leaves no stream of its own behind
                if self._detached is not None:
                    self._detached.request_stop(f"its Airflow task {_holder(context)} failed")
                raise
        submitted = self._start_detached(context)
        self.defer(trigger=MySqlCdcStreamTrigger(state=self.state_location, report=submitted.report,
                                                 submitted_at=submitted.submitted_at,
                                                 poll_interval_s=self.poll_interval_s, aws_conn_id=self.aws_conn_id),
                   method_name="execute_complete")

    def _start_detached(self, context: Context, *,
                        before_start: Callable[[DetachedStreamRef], None] | None = None) -> DetachedStreamRef:
        """Start the stream detached (its id is its report folder); returns once its driver is up.

        A stream this task's previous try asked to stop (the task was cleared, or retried after its
        ``execution_timeout``) may still be ending its last micro-batch: wait for it to let the
        pipeline's lease go first."""
        wait_for_a_stopping_stream(self.state_location, on_wait=self.log.info)
        job, state = self._job, PipelineState(self.state_location)
        job.report = self.report_folder(state, context)
        submitted = DetachedStreamRef(job.report, time.time())
        if before_start is not None:
            before_start(submitted)
        self._detached = self._stream_of(submitted)
        self.start_spark_program("binlog_stream.py", job.to_json(), state, context)
        return submitted

    # --- a detached continuous stream followed by the task (ResumableJobMixin)
    def submit_job(self, context: Context) -> None:
        """Start the stream detached. Its id goes into the task state store *before* it starts, so
        a worker that crashes while the stream starts leaves a retry that finds it, and a task
        cleared meanwhile (its task instance gone) cannot fail between the two. The mixin is given
        no id back, so it stores nothing more (``poll_until_complete`` and ``get_job_result`` then
        follow the stream this try started)."""
        store = context.get("task_state_store") if self.durable else None

        def remember(submitted: DetachedStreamRef) -> None:
            if store is not None:
                store.set(self.external_id_key, encode(submitted))

        self._start_detached(context, before_start=remember)
        return None

    def get_job_status(self, external_id: Any, context: Context) -> str:
        stream = self._watch(external_id)
        if stream.stop_requested() is not None:  # its task was killed: the next try starts a stream anew
            return STOPPED_BY_ITS_TASK
        return stream.status().phase.value

    def is_job_active(self, status: str) -> bool:
        return status in (StreamPhase.STARTING.value, StreamPhase.RUNNING.value)

    def is_job_succeeded(self, status: str) -> bool:
        return status == StreamPhase.FINISHED.value

    def poll_until_complete(self, external_id: Any, context: Context) -> None:
        """Follow the stream (its progress into the task log) until it ends; raise when it failed or
        was lost."""
        stream = self._detached = self._follow(external_id)
        self.log.info("following the stream whose report folder is %s", stream.folder)
        while True:
            status = stream.status(lambda line: self.log.info("%s", line))
            if not self.is_job_active(status.phase.value):
                break
            time.sleep(self.poll_interval_s)
        if status.phase is not StreamPhase.FINISHED:
            raise SparkJobFailed(status.message)

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any]:
        stream = self._follow(external_id)
        result = stream.report.result()
        stream.remove_report()
        return self._finished(result, context)

    def _follow(self, external_id: Any) -> DetachedStream:
        """The stream the mixin names, or (no id: ``submit_job`` returns none) the one this try started."""
        if external_id is None and self._detached is not None:
            return self._detached
        return self._watch(external_id)

    def _watch(self, external_id: Any) -> DetachedStream:
        return self._stream_of(decode(DetachedStreamRef, external_id, f"the task state store's {self.external_id_key}"))

    def _stream_of(self, ref: DetachedStreamRef) -> DetachedStream:
        return DetachedStream(self.state_location, ref.report, submitted_at=ref.submitted_at)

    def on_kill(self) -> None:
        if self._detached is not None:  # wherever its driver runs, also when this try only reconnected to it
            self._detached.request_stop(STOP_REASON)
        super().on_kill()

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The detached stream ended: its result, or its own error."""
        status = decode(StreamStatus, event, "the stream trigger's event")
        self.object_store  # noqa: B018 - the report folder lives in the state location
        ReportWatcher(self.report_folder(PipelineState(self.state_location), context)).remove()
        if status.phase is not StreamPhase.FINISHED or status.result is None:
            raise SparkJobFailed(status.message)
        return self._finished(status.result, context)

    def _finished(self, output: dict[str, Any] | None, context: Context) -> dict[str, Any]:
        result = decode(StreamResult, output, "the stream job's result")
        self.log.info("stream (%s) applied %d changes; end offset %s", self.mode, result.changes_applied,
                      result.end_offset or "-")
        self._result = result
        end = result.end_offset
        captured = PipelineState(self.state_location).latest().tables
        changed: dict[TableId, int] = {}  # per sink table: a routed table's shards summed
        for table, rows in result.table_changes.items():
            table_id = TableId.parse(table)
            sink = sink_table_id(table_id, captured[table_id].table_rule if table_id in captured else None)
            changed[sink] = changed.get(sink, 0) + rows
        emit_table_events(self.outlets, context, self.sink_root, [
            TableChanged(table_id, "stream", rows, end.offset if end else None, end.generation if end else 0)
            for table_id, rows in sorted(changed.items())])
        return encode(result)

    def get_openlineage_facets_on_start(self) -> Any:
        """Every table the pipeline captures: its source table as input, its Delta table as output
        (lineage/openlineage.py)."""
        return self._lineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """As on start, with the rows the stream changed in each table as the outputs' statistics."""
        return self._lineage(self._result)

    def _lineage(self, result: StreamResult | None = None) -> Any:
        if self.mode == "skip":
            return None  # it runs no stream
        self.object_store  # noqa: B018 - the state location may be on an object store
        state = PipelineState(self.state_location)
        rows = None if result is None else {TableId.parse(t): n for t, n in result.table_changes.items()}
        return self.source_lineage(state, state.load(state.latest_number()).chunk_keys, rows)


def _holder(context: Context) -> str:
    """The task, as the pipeline's stream lease names it to a stream it refuses (state/lease.py)."""
    ti = context["ti"]
    return f"Airflow task {ti.dag_id}.{ti.task_id} of run {context['run_id']}, try {ti.try_number}"
