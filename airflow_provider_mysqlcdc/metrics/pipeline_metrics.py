"""The pipeline's figures as Airflow metrics, through Airflow's ``Stats``: StatsD, Datadog or
OpenTelemetry, whichever the deployment's ``[metrics]`` section configures (none: nothing is sent).

Every name starts with ``mysqlcdc.`` (after Airflow's own prefix, ``airflow.`` by default) and names
the pipeline (its state location's last segment, the DAG id for a pipeline the builder made) and,
for per-table figures, the table as ``<database>.<table>``; dots inside a name become ``__`` and
other characters StatsD cannot carry ``_``. The same values go as tags (``pipeline``, ``table``)
to backends that take tags.

==============================================================  ========  ======================================
name                                                            type      sent
==============================================================  ========  ======================================
``mysqlcdc.snapshot.rows.<pipeline>.<db>.<table>``              counter   by each chunk task: the rows it read
``mysqlcdc.snapshot.chunk_duration.<pipeline>.<db>.<table>``    timer     by each chunk task
``mysqlcdc.stream.changes_applied.<pipeline>.<db>.<table>``     counter   per micro-batch, by the stream's task
``mysqlcdc.stream.batch_duration.<pipeline>``                   timer     per micro-batch
``mysqlcdc.stream.lag_seconds.<pipeline>``                      gauge     per micro-batch: event-time lag at its end
``mysqlcdc.stream.bytes_behind.<pipeline>``                     gauge     per micro-batch: binlog bytes to the head
``mysqlcdc.drift.events.<pipeline>.<db>.<table>``               counter   each drift event (state/drift.py)
``mysqlcdc.drift.tables_pending.<pipeline>``                    gauge     tables whose drift awaits a re-snapshot
``mysqlcdc.resnapshots.<pipeline>.<db>.<table>``                counter   each re-snapshot a plan task starts
==============================================================  ========  ======================================

The stream's figures come from its heartbeat in the state location (the progress files
``bin/status`` prints), read by the stream task while it runs (``StreamMetrics.observe``, polled by
the task or, deferred, by its trigger), so the Spark driver, which has no Airflow, sends nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from pathlib import PurePosixPath

from airflow.sdk.observability.stats import Stats, normalize_name_for_stats

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.progress import StreamBatchProgress, StreamOffsetProgress
from airflow_provider_mysqlcdc.state.drift import Drift, pending_drift, read_drift
from airflow_provider_mysqlcdc.state.registry import STREAM_OFFSET, STREAM_PROGRESS, PipelineState

log = logging.getLogger(__name__)

PREFIX = "mysqlcdc"


def pipeline_name(state_location: str) -> str:
    """The pipeline's name in metrics: its state location's last segment (``<state_dir>/<dag_id>``)."""
    return PurePosixPath(state_location.rstrip("/").split("://", 1)[-1]).name or "pipeline"


def _segment(name: str) -> str:
    return normalize_name_for_stats(name.replace(".", "__"), log_warning=False)


class PipelineMetrics:
    """Sends one pipeline's figures (see the module doc)."""

    def __init__(self, pipeline: str):
        self.pipeline = pipeline

    def _name(self, metric: str, table: TableId | None = None) -> str:
        parts = [PREFIX, metric, _segment(self.pipeline)]
        if table is not None:
            parts += [_segment(table.database), _segment(table.table)]
        return ".".join(parts)

    def _tags(self, table: TableId | None = None) -> dict[str, str]:
        return {"pipeline": self.pipeline, **({"table": str(table)} if table is not None else {})}

    def chunk_done(self, table: TableId, rows: int, seconds: float) -> None:
        Stats.incr(self._name("snapshot.rows", table), rows, tags=self._tags(table))
        Stats.timing(self._name("snapshot.chunk_duration", table), dt.timedelta(seconds=seconds), tags=self._tags(table))

    def resnapshots(self, tables: list[TableId]) -> None:
        for table in tables:
            Stats.incr(self._name("resnapshots", table), tags=self._tags(table))

    def changes_applied(self, table: TableId, count: int) -> None:
        Stats.incr(self._name("stream.changes_applied", table), count, tags=self._tags(table))

    def batch(self, seconds: float, lag_s: float) -> None:
        Stats.timing(self._name("stream.batch_duration"), dt.timedelta(seconds=seconds), tags=self._tags())
        Stats.gauge(self._name("stream.lag_seconds"), lag_s, tags=self._tags())

    def bytes_behind(self, count: int) -> None:
        Stats.gauge(self._name("stream.bytes_behind"), count, tags=self._tags())

    def lag(self, lag_s: float) -> None:
        Stats.gauge(self._name("stream.lag_seconds"), lag_s, tags=self._tags())

    def drift(self, new_events: dict[TableId, int], tables_pending: int) -> None:
        for table, count in new_events.items():
            Stats.incr(self._name("drift.events", table), count, tags=self._tags(table))
        Stats.gauge(self._name("drift.tables_pending"), tables_pending, tags=self._tags())


class StreamMetrics:
    """Sends the stream's figures of each micro-batch once, from its heartbeat (``observe``, polled).

    A batch is known by its stream process (``app_id``, ``started_at``) and number; its per-table
    counts are the process's running totals, so the changes a batch applied are the growth since
    the last batch seen (everything, for the first batch seen of a process). Drift events are
    counted from its creation on."""

    def __init__(self, state: PipelineState):
        self.state = state
        self.metrics = PipelineMetrics(pipeline_name(state.location))
        self._process: tuple[str, float] | None = None
        self._batch = -1
        self._counts: dict[str, int] = {}
        self._offset_at = 0.0
        self._drift: dict[TableId, int] | None = None
        self._pending: tuple[tuple[int, Drift], int] | None = None  # (generation, drift) -> tables pending
        try:  # drift recorded from now on is new (the events before are not counted again)
            self._drift = self._drift_counts(read_drift(state))
        except Exception as exc:  # noqa: BLE001 - then from the first look on
            log.info("drift not read yet: %s", exc)

    def observe(self) -> None:
        """Send what is new since the last look; a failure to read is logged, never raised."""
        try:
            self._observe_batch()
            self._observe_drift()
        except Exception as exc:  # noqa: BLE001 - metrics never fail the stream's task
            log.info("stream metrics not sent this time: %s: %s", type(exc).__name__, exc)

    def _observe_batch(self) -> None:
        batch = self.state.read_progress(StreamBatchProgress, STREAM_PROGRESS)
        if batch is not None:
            process = (batch.app_id, batch.started_at)
            if process != self._process:
                self._process, self._batch, self._counts = process, -1, {}
            if batch.batch != self._batch:
                self._batch = batch.batch
                for table, total in sorted(batch.table_changes.items()):
                    grown = total - self._counts.get(table, 0)
                    if grown > 0:
                        self.metrics.changes_applied(TableId.parse(table), grown)
                self._counts = dict(batch.table_changes)
                self.metrics.batch(batch.batch_seconds, batch.lag_s)
        offset = self.state.read_progress(StreamOffsetProgress, STREAM_OFFSET)
        if offset is not None and offset.committed_at != self._offset_at and offset.bytes_behind is not None:
            self._offset_at = offset.committed_at
            self.metrics.bytes_behind(offset.bytes_behind)
            if offset.lag_s is not None:  # also measured by a heartbeat while no batch runs (stream/heartbeat.py)
                self.metrics.lag(offset.lag_s)

    def _observe_drift(self) -> None:
        drift = read_drift(self.state)
        counts = self._drift_counts(drift)
        seen = self._drift if self._drift is not None else counts  # events before the first look are not new
        grown = {t: n - seen.get(t, 0) for t, n in counts.items() if n > seen.get(t, 0)}
        self.metrics.drift(grown, self._tables_pending(drift))
        self._drift = counts

    def _tables_pending(self, drift: Drift) -> int:
        """Tables whose drift awaits a re-snapshot; the registry generation (which may list thousands
        of splits) is read again only when it or the drift changed since the last look."""
        number = self.state.latest_number()
        if self._pending is None or self._pending[0] != (number, drift):
            captured = self.state.load(number).tables
            self._pending = ((number, drift), sum(1 for t in drift if pending_drift(drift, t, captured.get(t))))
        return self._pending[1]

    @staticmethod
    def _drift_counts(drift: Drift) -> dict[TableId, int]:
        return {table: len(events) for table, events in drift.items()}


class StreamMetricsFollower:
    """``StreamMetrics.observe`` every ``interval_s`` in a thread, for as long as a task runs a
    stream (``with``); a last look when it ends, so an available-now run's batches are all sent."""

    def __init__(self, state: PipelineState, interval_s: float):
        self.metrics = StreamMetrics(state)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mysqlcdc-stream-metrics", daemon=True)

    def __enter__(self) -> "StreamMetricsFollower":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.metrics.observe()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.metrics.observe()
