"""What the stream does to its sink tables between two micro-batches: clustering the tables a batch
merged into (``cluster_after_files``), and maintenance (compaction, checkpoints, vacuum) asked by a
maintenance task (state/maintenance.py) or due by ``maintenance_every_s``. Never while a batch is
applied: the caller holds the stream's lock around both (spark/stream_job.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy, MaintenanceReport, TableMaintenance
from airflow_provider_mysqlcdc.protocol.registry import Generation
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.routing import sink_table_id, sink_table_ids
from airflow_provider_mysqlcdc.state.maintenance import MaintenanceRequests
from airflow_provider_mysqlcdc.state.registry import PipelineState

log = logging.getLogger(__name__)

#: how often a stream looks for maintenance requests (state/maintenance.py)
MAINTENANCE_POLL_S = 5.0
#: the clustering after a batch takes at most this share of the batch's own time (at least one table)
CLUSTER_SHARE = 0.5
#: a stream without batches for this long clusters one of the tables left waiting (``cluster_idle``)
IDLE_S = 5.0


def inactive_sink_tables(generation: Generation, stopped: Collection[TableId]) -> set[TableId]:
    """The sink tables whose every source table of ``generation`` is ``stopped`` (frozen, or no longer
    captured): nothing merges into them, and upkeep leaves them alone (a routed table while one of
    its shards goes on is not one of them)."""
    going_on: dict[TableId, bool] = {}
    for table_id in generation.tables:
        target = sink_table_id(table_id, generation.table_rule(table_id))
        going_on[target] = going_on.get(target, False) or table_id not in stopped
    return {target for target, on in going_on.items() if not on}


class StreamUpkeep:
    def __init__(self, job: StreamJob, sink: Sink, state: PipelineState, fence: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic):
        self.job = job
        self.clock = clock
        self.waiting: list[TableId] = []  # tables whose clustering an earlier batch's upkeep left for later
        self.clustered_at = clock()
        self.sink = sink
        self.state = state
        self.fence = fence  # raises when another stream took the pipeline over (state/lease.py)
        self.maintenance = MaintenanceRequests(state)
        self.maintained_at = time.monotonic()  # the stream's own maintenance (maintenance_every_s)
        self.requests_seen_at = 0.0

    def cluster_due(self, tables: set[TableId], batch_s: float, left_out: Collection[TableId] = ()) -> None:
        """Between two batches (no merge of this stream runs meanwhile), cluster the data files of sink
        ``tables`` (those the batch merged into, of tables not frozen), where ``cluster_after_files`` files
        need it, and of the tables earlier batches left waiting, those first (unless ``left_out``: frozen since).
        A merge-on-read table only gets its small files packed and its mostly deleted files folded
        (``candidate_groups``' ``large_apart``): each batch's file of random keys overlaps all of its
        large files, which a batch's clustering would otherwise rewrite whole, again and again.

        The next batch waits meanwhile, so clustering takes at most ``CLUSTER_SHARE`` of the batch's
        own ``batch_s`` (at least one table; a run that fails or gives way counts as well): tables that
        fill up together (every batch of an OLTP workload touches every table) are clustered over the
        next batches, not all after one of them."""
        order = list(dict.fromkeys([*(t for t in self.waiting if t not in left_out), *sorted(tables)]))
        self.waiting, self.clustered_at = [], self.clock()
        if not self.job.cluster_after_files or not order:
            return
        self.fence()  # a stream another one took over stops here, as at the next batch
        allowed, spent = CLUSTER_SHARE * batch_s, 0.0
        for at, table_id in enumerate(order):
            if at and spent > allowed:  # a check that finds nothing to do costs next to nothing
                self.waiting = order[at:]
                log.info("clustering of %d table(s) waits for the next batch: %.1fs spent, the batch took %.1fs",
                         len(self.waiting), spent, batch_s)
                return
            started = self.clock()
            try:
                result = self.sink.cluster(table_id, min_files=self.job.cluster_after_files,
                                           large_apart=self.sink.merge_mode_of(table_id) == "merge-on-read")
            except Exception as exc:  # noqa: BLE001 - the batch is applied; clustering can wait for the next one
                log.warning("clustering %s failed (the batch stands; the next batch that merges into it tries again): "
                            "%s: %s", table_id, type(exc).__name__, exc)
                result = None
            took = self.clock() - started
            spent += took
            if result is not None:
                log.info("clustered %s by its chunk key: %s in %.1fs", table_id, result, took)

    def cluster_idle(self, left_out: Collection[TableId] = ()) -> None:
        """While no batch comes (``IDLE_S`` since the last clustering): a table earlier batches left
        waiting, one at a time, so that a stream that went quiet still clusters them."""
        if self.waiting and self.clock() - self.clustered_at >= IDLE_S:
            self.cluster_due(set(), 0.0, left_out)

    def cluster_waiting(self, left_out: Collection[TableId] = ()) -> None:
        """At the end of a bounded run (no batch follows): every table earlier batches left waiting."""
        if self.waiting:
            self.cluster_due(set(), float("inf"), left_out)

    def maintain_due(self) -> None:
        """Between two batches (no merge of this stream runs): answer the maintenance tasks' requests
        (state/maintenance.py), looked for every ``MAINTENANCE_POLL_S``, and run the stream's own
        maintenance every ``maintenance_every_s``. A failure is logged and reported, never the batch's."""
        now = time.monotonic()
        requests = []
        if now - self.requests_seen_at >= MAINTENANCE_POLL_S:
            self.requests_seen_at = now
            requests = self.maintenance.pending()
        own = bool(self.job.maintenance_every_s) and now - self.maintained_at >= self.job.maintenance_every_s
        if not requests and not own:
            return
        self.fence()  # a stream another one took over touches nothing
        registered = self.state.load(self.state.latest_number()).tables
        captured = sink_table_ids((t, c.table_rule) for t, c in registered.items())  # a routed table once
        for request in requests:
            wanted = set(request.tables)
            tables = sink_table_ids((t, c.table_rule) for t, c in registered.items()
                                    if not wanted or t.quoted in wanted or sink_table_id(t, c.table_rule).quoted in wanted)
            log.info("maintenance asked by %s: %s of %d table(s)", request.requested_by, request.policy, len(tables))
            self.maintenance.answer(self._maintain(request.request_id, request.policy, tables))
        if own:
            self.maintained_at = time.monotonic()
            policy = MaintenancePolicy(vacuum_retention_s=self.job.vacuum_retention_s)
            log.info("the stream's maintenance, every %.0fs: %s of %d table(s)", self.job.maintenance_every_s, policy,
                     len(captured))
            self._maintain(f"stream-{self.job.app_id}", policy, captured)

    def _maintain(self, request_id: str, policy: MaintenancePolicy, tables: list[TableId]) -> MaintenanceReport:
        started = time.monotonic()
        done: list[TableMaintenance] = []
        for table_id in tables:
            try:
                done += self.sink.maintain(table_id, policy)
            except Exception as exc:  # noqa: BLE001 - the stream goes on; the report says what failed
                log.warning("maintenance of %s failed (the stream goes on): %s: %s", table_id, type(exc).__name__, exc)
                done.append(TableMaintenance(self.sink.table_uri(table_id), 0, 0, note=f"failed: {exc}"))
        return MaintenanceReport(request_id, f"the stream {self.job.app_id}", policy, done,
                                 round(time.monotonic() - started, 3))
