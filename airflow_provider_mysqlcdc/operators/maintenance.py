"""``MySqlCdcMaintenanceOperator``: compaction, checkpoints and vacuum of a pipeline's Delta tables,
on a schedule of its own, never in a running stream's way.

The stream writes one or a few small files per micro-batch into each table it changes. The stream
itself already clusters a table's overlapping and small files between two batches
(``cluster_after_files``); this operator maintains every table of the pipeline and its changelog in
full (sinks/delta/maintenance.py): compaction in chunk-key order, a Delta checkpoint, and, when given a
retention, vacuum.

When a live stream holds the pipeline's lease (state/lease.py), the operator asks it to do the work
between two of its micro-batches (state/maintenance.py), so no maintenance commit ever races one of
its merges, and waits for its report. When no stream runs, it does the work itself, in the task;
a stream or a chunk commit that starts meanwhile meets ordinary Delta conflicts, retried (bounded and
logged) on both sides. Either way the task's log lists what was done per table, and its XCom is the
``MaintenanceReport``. The worker needs the provider's ``spark`` extra (delta-rs), not Spark.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, MaintenanceNotAnswered
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.hooks.object_store import open_object_store
from airflow_provider_mysqlcdc.operators.arguments import sink_spec_of, state_location_of
from airflow_provider_mysqlcdc.protocol.envelope import encode
from airflow_provider_mysqlcdc.protocol.maintenance import (
    DEFAULT_FOLD_SHARE,
    DEFAULT_TARGET_FILE_BYTES,
    MaintenancePolicy,
    MaintenanceReport,
    MaintenanceRequest,
)
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.routing import sink_table_id
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.maintenance import MaintenanceRequests, new_request_id
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.sink import recorded_sink, refuse_another_sink


class MySqlCdcMaintenanceOperator(BaseOperator):
    """Maintain the pipeline's Delta tables (see the module doc).

    :param sink_root: where the sink tables live (default: the pipeline's, as its first run recorded it)
    :param state_location: the pipeline's state location (``<state_dir>/<dag_id>``)
    :param tables: ``db.table`` names to maintain (default: every table the pipeline captures)
    :param compact: rewrite small and overlapping files in chunk-key order (changelogs: bin-packed)
    :param checkpoint: write a Delta checkpoint and drop log files past the log retention
    :param vacuum_retention_hours: delete data files that left a table longer ago than this; time
        travel to versions within it keeps working (default: no vacuum). It becomes the tables'
        ``delta.deletedFileRetentionDuration``; keep it longer than any reader of an older version runs
    :param target_file_mb: the size of the files compaction writes
    :param fold_share: compaction rewrites a file alone once merge-on-read deleted this share of its
        rows (a Delta deletion vector, Iceberg position deletes), so readers stop skipping them
    :param stream_timeout_s: how long to wait for a running stream to answer
    :param poll_interval_s: how often to look for its answer
    :param aws_conn_id: an ``aws`` connection whose credentials open the lake and the state location
        on an object store (hooks/object_store.py); none: the machine's own credentials
    :param sink_format: the sink tables' format, ``delta`` or ``iceberg`` (default: the pipeline's)
    :param iceberg_namespace: an Iceberg sink's namespace of each table (default: the pipeline's)
    :param iceberg_catalog_conn_id: the Iceberg catalog's connection (default: the pipeline's)

    The sink settings default to those the pipeline's first run recorded in its state location
    (state/sink.py); one given that differs from them is refused, naming both.
    """

    template_fields: Sequence[str] = ("sink_root", "state_location", "tables", "vacuum_retention_hours")

    def __init__(self, *, sink_root: str | None = None, state_location: str | None = None, state: str | None = None,
                 tables: Sequence[str] | None = None, compact: bool = True,
                 checkpoint: bool = True, vacuum_retention_hours: float | None = None, target_file_mb: int = 128,
                 fold_share: float = DEFAULT_FOLD_SHARE,
                 stream_timeout_s: float = 1800.0, poll_interval_s: float = 5.0, aws_conn_id: str | None = None,
                 sink_format: str | None = None, iceberg_namespace: str | None = None,
                 iceberg_catalog_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sink_root = sink_root
        self.state_location = state_location_of(state_location, state, "MySqlCdcMaintenanceOperator")
        self.tables = tables
        self.compact = compact
        self.checkpoint = checkpoint
        self.vacuum_retention_hours = vacuum_retention_hours
        self.target_file_mb = target_file_mb
        self.fold_share = fold_share
        self.stream_timeout_s = stream_timeout_s
        self.poll_interval_s = poll_interval_s
        self.aws_conn_id = aws_conn_id
        self.sink_format = sink_format
        self.iceberg_namespace = iceberg_namespace
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self._named_sink(SinkSpec(sink_root or "-"))  # a malformed setting is refused when the DAG is parsed
        self._request: tuple[MaintenanceRequests, str] | None = None  # the request a running stream has

    def policy(self) -> MaintenancePolicy:
        hours = self.vacuum_retention_hours
        try:
            retention = None if hours in (None, "") else float(hours) * 3600
        except (TypeError, ValueError):
            raise ConfigurationError(f"vacuum_retention_hours must be a number of hours, got {hours!r}.") from None
        return MaintenancePolicy(compact=self.compact, checkpoint=self.checkpoint, vacuum_retention_s=retention,
                                 target_file_bytes=int(self.target_file_mb * (1 << 20))
                                 if self.target_file_mb else DEFAULT_TARGET_FILE_BYTES, fold_share=self.fold_share)

    def _named_sink(self, base: SinkSpec) -> SinkSpec:
        """``base`` with the sink settings this task names (refused when malformed)."""
        return sink_spec_of(self.sink_root or base.root, self.sink_format or base.format,
                            self.iceberg_namespace or base.namespace, self.iceberg_catalog_conn_id or base.catalog_conn_id)

    def pipeline_sink(self, state: PipelineState) -> SinkSpec:
        """The sink the pipeline's first run recorded; the settings this task names, for a pipeline that
        recorded none (its last run predates the record). Refused when the task names another sink."""
        recorded = recorded_sink(state)
        if recorded is None:
            if not self.sink_root:
                raise ConfigurationError(f"The pipeline at {state.location} has recorded no sink yet (no run since "
                                         "this version of the provider): give sink_root (and its sink_format, "
                                         "iceberg_namespace and iceberg_catalog_conn_id when not the defaults).")
            return self._named_sink(SinkSpec(self.sink_root))
        refuse_another_sink(state, recorded, self._named_sink(recorded))
        return recorded

    def execute(self, context: Context) -> dict[str, Any]:
        policy = self.policy()  # refused before anything is touched
        tables = [TableId.parse(t) for t in self.tables or ()]
        open_object_store(self.aws_conn_id)  # installed before the state location is touched
        state = PipelineState(self.state_location)
        sink = self.pipeline_sink(state)
        if sink.catalog_conn_id:  # and the catalog's, before the lake is
            open_object_store(self.aws_conn_id, sink.catalog_conn_id)
        registered = state.load(state.latest_number()).tables
        captured = sorted(registered)
        routed = {t: sink_table_id(t, c.table_rule) for t, c in registered.items()}
        unknown = sorted(set(tables) - set(captured) - set(routed.values()))
        if unknown:
            raise ConfigurationError(f"The pipeline does not capture {', '.join(map(str, unknown))}: name tables it "
                                     f"captures ({', '.join(map(str, captured)) or 'none yet'}), or none for all.")
        # a source table routed into a shared sink table: that sink table, once
        tables = sorted({routed.get(t, t) for t in tables})
        lease = StreamLeases(state).current()
        if lease is not None and lease.live:
            self.log.info("a stream runs on the pipeline (%s): asking it to maintain the tables between two batches",
                          lease.describe())
            report = self._ask_the_stream(state, policy, tables, context)
        else:
            report = None
        if report is None:
            report = self._maintain_here(sink, policy, tables or sorted(set(routed.values())))
        for table in report.tables:
            self.log.info("%s", table)
        self.log.info("maintenance (%s) done by %s in %.1fs", policy, report.done_by, report.seconds)
        return encode(report)

    def _ask_the_stream(self, state: PipelineState, policy: MaintenancePolicy, tables: list[TableId],
                        context: Context) -> MaintenanceReport | None:
        """The stream's report, or None when the stream ended without answering (the request withdrawn)."""
        requests = MaintenanceRequests(state)
        ti = context["ti"]
        request = MaintenanceRequest(new_request_id(), policy, [t.quoted for t in tables],
                                     f"Airflow task {ti.dag_id}.{ti.task_id} of run {context['run_id']}", time.time())
        requests.submit(request)
        self._request = (requests, request.request_id)
        leases = StreamLeases(state)
        deadline = time.monotonic() + self.stream_timeout_s
        try:
            while True:
                report = requests.report(request.request_id)
                if report is not None:
                    return report
                lease = leases.current()
                if lease is None or not lease.live:
                    self.log.info("the stream ended before answering (%s): maintaining the tables here",
                                  lease.why_free() if lease else "no lease")
                    return None
                if time.monotonic() > deadline:
                    raise MaintenanceNotAnswered(
                        f"The stream ({lease.describe()}) did not answer maintenance request {request.request_id} "
                        f"within {self.stream_timeout_s:.0f}s. A stream answers between two micro-batches; one "
                        "applying a very large batch answers after it: raise stream_timeout_s, or run the "
                        "maintenance while no stream runs.")
                time.sleep(self.poll_interval_s)
        finally:
            requests.withdraw(request.request_id)  # answered, or not wanted any more
            self._request = None

    def _maintain_here(self, spec: SinkSpec, policy: MaintenancePolicy, wanted: list[TableId]) -> MaintenanceReport:
        started = time.monotonic()
        sink = open_sink(spec)  # the credentials are installed (execute)
        done = []
        for number, table_id in enumerate(wanted, 1):
            done += sink.maintain(table_id, policy)
            self.log.info("maintenance: %d of %d table(s) done (%s)", number, len(wanted), table_id)
        return MaintenanceReport(new_request_id(), "this task", policy, done, round(time.monotonic() - started, 3))

    def on_kill(self) -> None:
        if self._request is not None:  # a stream that has not started on it leaves it alone
            requests, request_id = self._request
            requests.withdraw(request_id)
