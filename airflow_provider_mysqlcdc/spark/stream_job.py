"""The stream job: Structured Streaming over the binlog source, merged into the sink per micro-batch.

Exactly once: Spark's checkpoint records each batch's offsets before it runs; ``foreachBatch``
merges the batch into every table in one commit per table, which records the binlog position of
its last change (sinks/base.py), so a batch replayed after a crash (kill -9 included) applies only
what a table does not hold yet. The same makes a lost or replaced checkpoint safe: a stream whose
checkpoint is new starts where the pipeline's last stream into the same sink committed
(``progress/stream-offset.json``), else at the registry's smallest high watermark, and applies to
each table only the changes after its recorded position; a table recorded beyond the server's
binlog head (the binlog was reset, or this is another server) is refused before anything is written.
``available-now`` catches up to the binlog head as of start and exits; ``continuous`` runs
micro-batches every ``trigger_interval_s`` until stopped. Tables added to the registry while it
runs are picked up at the next micro-batch (binlog_source.py); staged splits are applied here, in
binlog order with the batch's changes, under the same idempotency keys.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.cdc.binlog.framing import chosen_framing
from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import chosen_decoder
from airflow_provider_mysqlcdc.cdc.errors import LeaseLost
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig, parse_server_id_range
from airflow_provider_mysqlcdc.cdc.source.preflight import check_heartbeat_query, run_heartbeat_query
from airflow_provider_mysqlcdc.cdc.source.server import binlog_changed_error
from airflow_provider_mysqlcdc.protocol.envelope import encode
from airflow_provider_mysqlcdc.protocol.jobs import STRUCTURED_STREAMING, StreamJob, stream_engine_of
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.progress import (
    StreamBatchProgress,
)
from airflow_provider_mysqlcdc.protocol.results import StreamResult
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.routing import captured_target
from airflow_provider_mysqlcdc.spark.batch_rows import batch_items, piece_rows, row_key, spill_urls
from airflow_provider_mysqlcdc.spark.binlog_source import SOURCE_NAME, BinlogDataSource
from airflow_provider_mysqlcdc.spark.checkpoint import apply_local_checkpoint_settings
from airflow_provider_mysqlcdc.spark.connect import is_connect
from airflow_provider_mysqlcdc.spark.report import stop_request
from airflow_provider_mysqlcdc.spark.starting import SparkStart
from airflow_provider_mysqlcdc.state.cleanup import release_applied_staged_files
from airflow_provider_mysqlcdc.state.credentials import install_from_private_file
from airflow_provider_mysqlcdc.state.lease import LeaseKeeper, StreamLeases
from airflow_provider_mysqlcdc.state.registry import STREAM_PROGRESS, PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas
from airflow_provider_mysqlcdc.state.servers import ServerEpochs
from airflow_provider_mysqlcdc.state.sink import refuse_missing_sink_tables, settle_sink
from airflow_provider_mysqlcdc.state.spill import remove_all_spill_folders, remove_spill_folder
from airflow_provider_mysqlcdc.stream.applier import BatchApplier
from airflow_provider_mysqlcdc.stream.batches import BatchPlanner
from airflow_provider_mysqlcdc.stream.heartbeat import Heartbeat, beat_query
from airflow_provider_mysqlcdc.stream.identity import driver_identity, stream_identity
from airflow_provider_mysqlcdc.stream.loop import BatchSteps, StreamLoop
from airflow_provider_mysqlcdc.stream.positions import record_processed, registry_start_offset, resume_offset
from airflow_provider_mysqlcdc.stream.read_process import ReadProcess
from airflow_provider_mysqlcdc.stream.reading import BinlogReading
from airflow_provider_mysqlcdc.stream.tables import ServerTables
from airflow_provider_mysqlcdc.stream.upkeep import StreamUpkeep

log = logging.getLogger(__name__)

class StreamBatchFunction:
    """The ``foreachBatch`` function: reads a micro-batch's rows and hands their items to the batch's
    steps (stream/loop.py ``BatchSteps``: the stream's rules, stream/applier.py, its progress, then
    clustering and maintenance between batches, stream/upkeep.py).

    On a Spark Connect session this object runs in the server's foreachBatch worker, so ``source``
    holds no password but the private file it is read from, which holds the object store's
    credentials too: each batch installs them there (spark/connect.py)."""

    def __init__(self, source: SourceConfig, job: StreamJob, fence: Callable[[], None] = lambda: None):
        self.source = source
        self.fence = fence  # raises when another stream took the pipeline over (state/lease.py)
        state = PipelineState(job.state)
        known = KnownSchemas(state)
        self.sink = open_sink(job.sink)
        self.applier = BatchApplier(job, self.sink, state, ServerTables(source, state, known), known, fence)
        self.upkeep = StreamUpkeep(job, self.sink, state, fence)
        self.steps = BatchSteps(self.applier, self.upkeep)

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        with self.steps.applying:  # maintenance between batches waits for it, and it waits for maintenance
            self._apply_batch(batch_df, batch_id)
            self.upkeep.maintain_due()

    def _apply_batch(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        install_from_private_file(self.source.password_file)
        self.fence()
        # Sorted here, not with orderBy: Spark's sort samples its input first, which would read the
        # binlog range twice. The rows are small: what does not fit a task's inline budget comes
        # through spill files, read one run at a time (batch_rows.py).
        began_at = time.time()  # the Spark job's start, which the pieces' timings are set against
        rows, pieces = piece_rows(sorted(batch_df.collect(), key=row_key))
        read_s = time.monotonic() - started
        spilled = spill_urls(rows)
        self.steps.apply(rows[0].gen if rows else None, batch_items(rows), batch_id, started=started,
                         read_s=lambda: read_s, spill_files=len(spilled), pieces=lambda: pieces, began_at=began_at)
        for folder in sorted({url.rsplit("/", 1)[0] for url in spilled}):
            remove_spill_folder(folder)


def progress_offset(progress: Any, which: str) -> StreamOffset | None:
    """``startOffset`` or ``endOffset`` of a query progress (StreamingQueryProgress and SourceProgress are dicts)."""
    sources = (progress or {}).get("sources")
    text = sources[0].get(which) if sources else None
    try:
        data = json.loads(text) if text else None
    except ValueError:  # no offset yet (the first batch of a query)
        return None
    return StreamOffset.from_spark(data, f"the query progress's {which}") if data else None


def record_processed_offset(state: PipelineState, job: StreamJob, progress: Any,
                            measure: Callable[[BinlogOffset], tuple[BinlogOffset, int | None]] | None = None, *,
                            heartbeat: bool = False) -> None:
    """Where the stream has processed to, by a query progress's end offset (stream/positions.py
    ``record_processed``)."""
    end = progress_offset(progress, "endOffset")
    if end:
        record_processed(state, job, end, progress.get("batchId"), measure, heartbeat=heartbeat)


def refuse_positions_beyond_the_head(source: SourceConfig, state: PipelineState, sink: Sink) -> None:
    """A sink table recorded past the server's binlog head was written from another binlog: the
    server's binlog was reset (RESET MASTER), restored, or this is another server. And a captured
    table whose sink table is missing (``refuse_missing_sink_tables``)."""
    head = source.run(ServerEpochs(state).head, "reading the binlog head")  # in its epoch: after a failover, later
    unrecorded = []
    captured_tables = state.latest().tables
    for table_id, captured in sorted(captured_tables.items()):
        target = captured_target(table_id, captured.table_rule)
        position = sink.applied_position(target.table_id, shard=target.shard)
        if position is None:
            unrecorded.append(table_id)
        elif position[:2] > head.sort_key:
            raise binlog_changed_error(f"The sink table of {table_id} holds changes up to binlog file number "
                                       f"{position[0]} position {position[1]}, beyond the server's binlog head {head}")
    refuse_missing_sink_tables({t: captured_tables[t] for t in unrecorded}, sink)


class BatchFollower:
    """Follows the query's finished micro-batches from the process that started it, polled while it
    runs (``follow``): records each one's end offset and releases the staged files it made
    unreplayable, unless another stream took the pipeline over meanwhile (``fence``). With
    ``echo_batches`` it also logs each batch's progress as the batch recorded it: on a Spark Connect
    session the batch is applied, and logs, on the server, while this runs here, where the task log is.

    Polled rather than a ``StreamingQueryListener``: on Spark Connect a listener runs in a client
    thread fed by a long-running call, and removing it while an event is pending can deadlock
    (SPARK-59623); the query's ``recentProgress`` serves both kinds of session alike."""

    def __init__(self, state: PipelineState, job: StreamJob, fence: Callable[[], None], *, echo_batches: bool = False,
                 measure: Callable[[BinlogOffset], tuple[BinlogOffset, int | None]] | None = None,
                 run_query: Callable[[str], None] | None = None):
        self.state = state
        self.job = job
        self.fence = fence
        self.echo_batches = echo_batches
        self.measure = measure  # the head and the bytes behind it of a batch's end (record_processed_offset)
        self.run_query = run_query  # runs the heartbeat query on the source
        self.last_batch = -1
        self.heartbeat = Heartbeat(job.heartbeat_interval_s)

    def follow(self, query: Any) -> None:
        """Handle the batches that finished since the last call, in order; a heartbeat when none did
        for ``heartbeat_interval_s`` (``beat``)."""
        latest = query.lastProgress  # one batch's progress: the recent ones are read only when it is new
        new = [p for p in query.recentProgress or () if p.get("batchId", -1) > self.last_batch] \
            if latest and latest.get("batchId", -1) > self.last_batch else []
        if not new:
            if self.heartbeat.due():
                self.beat(query)
            return
        self.heartbeat.batch_finished()
        try:
            self.fence()
        except LeaseLost:
            return
        for progress in new:
            if self.last_batch < 0:  # the start-up's share of the first batch, in the task log
                log.info("first batch %d, Spark's phases: %s", progress["batchId"], ", ".join(
                    f"{name} {ms} ms" for name, ms in sorted((progress.get("durationMs") or {}).items())))
            self.last_batch = progress["batchId"]
            last = progress is new[-1]  # the server is asked once per look, for the newest batch
            record_processed_offset(self.state, self.job, progress, self.measure if last else None)
            # the batch's start is the previous batch's end: committed in the checkpoint, never replayed
            release_applied_staged_files(self.state, progress_offset(progress, "startOffset"))
        if self.echo_batches:
            self._echo(self.last_batch)

    def beat(self, query: Any) -> None:
        """The heartbeat: measure the last committed batch's end against the head again, then run the
        source's heartbeat query, whose write the next batch reads (stream/heartbeat.py)."""
        self.heartbeat.beat()
        if self.last_batch >= 0:
            try:
                self.fence()
            except LeaseLost:
                return
            record_processed_offset(self.state, self.job, query.lastProgress, self.measure, heartbeat=True)
        beat_query(self.job.heartbeat_query, self.run_query)

    def _echo(self, batch_id: int) -> None:
        batch = self.state.read_progress(StreamBatchProgress, STREAM_PROGRESS)
        if batch is None or batch.app_id != self.job.app_id or batch.batch != batch_id:
            return
        lag_s = batch.finished_at - batch.last_change_time_ms / 1000 if batch.last_change_time_ms else 0.0
        log.info("stream batch %d: %d changes applied (%d in total); binlog head %s; event-time lag %.1fs", batch_id,
                 batch.changes_in_batch, batch.changes_total, batch.head_at_batch_end, lag_s)


def run_stream_job(spark: SparkStart, source: SourceConfig, job: StreamJob, *, source_file: str) -> dict[str, Any]:
    """Run the stream on ``spark``, the program's Spark side while it starts (spark/starting.py): the
    driver engine prepares, starts its read process and runs its batches while the SparkContext
    starts; Structured Streaming waits for its session first. Its Spark side reads the source's
    password (and the object store's credentials) from the private file ``source_file``: the task's
    under spark-submit, the server's on a Spark Connect session (spark/connect.py). Nothing secret
    travels with the functions Spark runs."""
    if not source_file:
        raise ValueError("the stream's Spark side needs source_file, the private credentials file it reads")
    state = PipelineState(job.state)
    settle_sink(state, job.sink, outside_airflow=True)  # recorded if none was (a stream started by hand), or refused
    job.stream_engine = stream_engine_of(job.stream_engine, spark_connect=spark.connect)
    session = spark.session() if job.stream_engine == STRUCTURED_STREAMING else None
    log.info("stream job started, stream engine %s; binlog rows decoded by the %s decoder here (executors without "
             "the compiled one use its Python twin), events framed %s", job.stream_engine, chosen_decoder(),
             "by python-mysql-replication" if chosen_framing() == "library" else "by our own framing where it can")
    # first of all: nothing below may run while another stream runs (it deletes spill folders, too)
    held = StreamLeases(state).acquire(job.holder or f"a stream started outside Airflow (process {os.getpid()} on "
                                       f"{socket.getfqdn()})", ttl_s=job.lease_ttl_s, report=job.report)

    def on_spark() -> None:
        """The application the stream runs as, in its lease and its log, once its context is up."""
        app_id, ui_url = spark.application()
        held.renew(app_id=app_id, ui_url=ui_url)
        log.info("stream job on Spark application %s", app_id)

    # a detached stream is asked to stop through its report folder: even before it holds the lease
    requested = (lambda: stop_request(job.report)) if job.report else (lambda: None)
    stopping = LoopStop()  # the driver loop's stop (stream/loop.py)
    stop = (lambda: stop_queries(session)) if session is not None else (lambda: stop_loop(stopping))
    with LeaseKeeper(held, stop_stream=stop, stop_requested=requested) as keeper:
        if session is not None:
            on_spark()
            result = _run_stream(session, source, job, source_file, state, held.check)
        else:  # its batches need no Spark: named once the context is up, while they run; stopped if it fails
            spark.when_ready(on_spark, failed=lambda exc: stop_loop(stopping))
            result = _run_driver_loop(source, job, state, held.check, stopping)
        if keeper.lost:
            raise keeper.lost
        if keeper.stop_reason:
            log.info("the stream stopped on request: %s", keeper.stop_reason)
        return result


def stop_queries(spark: Any, grace_s: float = 10.0) -> None:
    """Stop the stream's query; end the driver when it has not stopped within ``grace_s`` (a query
    stopped in the middle of planning a batch may wait forever). Either way is safe: the stream
    resumes exactly from its checkpoint, as after a kill -9."""
    stopper = threading.Thread(target=lambda: [query.stop() for query in spark.streams.active], daemon=True)
    stopper.start()
    stopper.join(grace_s)
    if stopper.is_alive():
        log.error("the stream's query did not stop within %.0fs: ending its driver", grace_s)
        if is_connect(spark):  # the query runs on the server: ending the session there stops it
            release = threading.Thread(target=spark.stop, daemon=True)
            release.start()
            release.join(grace_s)
        logging.shutdown()
        os._exit(3)


class LoopStop(threading.Event):
    """The driver loop's stop: set to stop it; ``finished`` once the loop has returned."""

    def __init__(self) -> None:
        super().__init__()
        self.finished = threading.Event()


def stop_loop(stopping: LoopStop, grace_s: float = 30.0) -> None:
    """Stop the driver loop after the batch it is applying; end the process when the loop has not
    returned within ``grace_s`` of the first request (asked again, nothing more happens). Either way
    is safe: the loop resumes exactly from its last end, as after a kill -9."""
    if stopping.is_set():
        return
    stopping.set()

    def overdue() -> None:
        if not stopping.finished.wait(grace_s):
            log.error("the stream's driver loop did not stop within %.0fs: ending its driver", grace_s)
            logging.shutdown()
            os._exit(3)

    threading.Thread(target=overdue, name="mysqlcdc-stop-deadline", daemon=True).start()


def _prepare_stream(source: SourceConfig, job: StreamJob, state: PipelineState, batches: StreamBatchFunction) -> None:
    """What either engine does before its first batch: the heartbeat query checked, tables recorded
    past the binlog head refused (before anything is written), old spill folders removed."""
    if job.heartbeat_query:  # refused now, before anything is written, if it cannot run
        source.run(lambda conn: check_heartbeat_query(source, conn, job.heartbeat_query), "checking the heartbeat query")
    refuse_positions_beyond_the_head(source, state, batches.sink)
    remove_all_spill_folders(state)


def _measures(source: SourceConfig, state: PipelineState) -> tuple[Callable[[BinlogOffset], tuple[BinlogOffset, int | None]],
                                                                   Callable[[str], None]]:
    """How far a batch's end is behind the head, and running the heartbeat query, on ``source``."""
    epochs = ServerEpochs(state)
    return (lambda end: source.run(lambda conn: epochs.behind(conn, end),
                                   "measuring the stream's distance to the binlog head"),
            lambda statement: source.run(lambda conn: run_heartbeat_query(conn, statement), "running the heartbeat query"))


def _run_driver_loop(source: SourceConfig, job: StreamJob, state: PipelineState, fence: Callable[[], None],
                     stopping: LoopStop) -> dict[str, Any]:
    """The stream with ``stream_engine="driver"``: its batches read and applied in this process
    (stream/loop.py), from where the pipeline's last stream into this sink ended."""
    preparing = time.monotonic()
    source = source.with_retry(job.retry_budget_s)
    batches = StreamBatchFunction(source, job, fence)  # in this process: the source's own settings
    _prepare_stream(source, job, state, batches)
    job.app_id, first_batch = driver_identity(job.checkpoint, job.app_id)
    start = resume_offset(state, job) or registry_start_offset(state)
    planner = BatchPlanner(source, state, server_id_range=parse_server_id_range(job.server_id_range),
                           decode_pieces=1, on_binlog_purged=job.on_binlog_purged)
    # its range reads decode in a process of their own while this one merges (stream/read_process.py)
    reading = ReadProcess(BinlogReading(source, state, changelog=job.changelog, table_patterns=job.table_patterns,
                                        exclude_tables=job.exclude_tables))
    try:
        measure, run_query = _measures(source, state)
        loop = StreamLoop(job, state, batches.steps, planner, reading, fence, measure=measure, run_query=run_query,
                          stopping=stopping)
        until = planner.head() if job.mode == "available-now" else None
        log.info("stream prepared in %.2fs; its batches run in the driver (stream_engine driver), from %s (batch %d)%s",
                 time.monotonic() - preparing, start, first_batch, f" up to {until}" if until else "")
        started = time.monotonic()
        done = loop.run(start, first_batch=first_batch, until=until)
    finally:
        reading.close()
        stopping.finished.set()  # a stop's deadline (stop_loop) no longer applies
    return encode(StreamResult(job.mode, batches.applier.rows_applied, job.app_id, round(time.monotonic() - started, 3),
                               done.last_batch, done.end, dict(batches.applier.table_changes)))


def _run_stream(spark: Any, source: SourceConfig, job: StreamJob, source_file: str, state: PipelineState,
                fence: Callable[[], None]) -> dict[str, Any]:
    preparing = time.monotonic()
    source = source.with_retry(job.retry_budget_s)
    connect = is_connect(spark)  # the applier and the source's readers run on a Spark Connect server
    spark_side = source.for_executors(source_file)  # what the functions Spark runs get: no password
    batches = StreamBatchFunction(spark_side, job, fence)
    _prepare_stream(source, job, state, batches)
    identity = stream_identity(job.checkpoint, lambda: resume_offset(state, job) or registry_start_offset(state))
    job.app_id = job.app_id or identity.app_id
    if identity.new:
        log.info("stream checkpoint %s is new (identity %s): it starts at %s, and applies to each table only the "
                 "changes after the position the table records", job.checkpoint, identity.app_id, identity.initial_offset)
    log.info("stream prepared in %.2fs (lease, sink positions against the binlog head, spill folders, checkpoint "
             "identity)", time.monotonic() - preparing)
    setting_up = time.monotonic()
    spark.dataSource.register(BinlogDataSource)
    apply_local_checkpoint_settings(spark, job.checkpoint)
    reader = spark.readStream.format(SOURCE_NAME).option("job", job.to_json()).option("source", spark_side.to_json())
    if identity.initial_offset:
        reader = reader.option("initial_offset", json.dumps(identity.initial_offset.to_spark()))
    stream = reader.load()
    writer = stream.writeStream.foreachBatch(batches).option("checkpointLocation", job.checkpoint)
    if job.mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{job.trigger_interval_s} seconds")
    started, started_at = time.monotonic(), time.time()
    log.info("stream query set up in %.2fs (Spark plans the binlog source in a Python worker); starting it",
             started - setting_up)
    measure, run_query = _measures(source, state)
    follower = BatchFollower(state, job, fence, echo_batches=connect, measure=measure, run_query=run_query)
    query = writer.start()
    while not query.awaitTermination(1):
        follower.follow(query)
        if not connect:  # on a Spark Connect session the applier lives on the server: between batches only
            batches.steps.maintain_idle()
    fence()  # stopped because another stream took over: record nothing
    follower.follow(query)  # the batches that finished since its last look (all of a short available-now run)
    progress = query.lastProgress or {}
    # the query ended without error: its last batch is committed too
    end = progress_offset(progress, "endOffset")
    release_applied_staged_files(state, end)
    applied, table_changes = (changes_applied_since(state, job, started_at) if connect else
                              (batches.applier.rows_applied, dict(batches.applier.table_changes)))
    return encode(StreamResult(job.mode, applied, job.app_id, round(time.monotonic() - started, 3),
                               progress.get("batchId"), end, table_changes))


def changes_applied_since(state: PipelineState, job: StreamJob, since: float) -> tuple[int, dict[str, int]]:
    """The changes this stream applied, in all and per table, by its batches' progress record: on a
    Spark Connect session the ``BatchApplier`` that counts them runs on the server, not in this process."""
    progress = state.read_progress(StreamBatchProgress, STREAM_PROGRESS)
    if progress is None or progress.app_id != job.app_id or progress.finished_at < since:
        return 0, {}
    return progress.changes_total, progress.table_changes
