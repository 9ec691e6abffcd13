"""Where a pipeline stands, without opening Airflow.

    python -m airflow_provider_mysqlcdc.status STATE_LOCATION      (bin/status does the same)

Prints the captured tables (registry generation, splits, rows, how each was captured, and what
happened to them that the sink cannot follow by itself: dropped, renamed, replaced, rows changed
without row events, columns dropped or renamed), the chunks
done per table in the latest DAG run, and the stream: its last micro-batch, the last change it
applied, the binlog position it committed and how far that is behind the server's binlog head. The server is asked only when a
source is configured in the environment (``MYSQLCDC_SOURCE_*`` or ``MYSQLCDC_SOURCE_FILE``); the
state location is all it reads otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import time
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.protocol.envelope import Record, encode
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.progress import (
    ChunkProgress,
    RunPlanProgress,
    StreamBatchProgress,
    StreamHistory,
    StreamOffsetProgress,
)
from airflow_provider_mysqlcdc.sinks.routing import sink_table_id
from airflow_provider_mysqlcdc.state.ddl_log import latest_ddl, read_ddl_log
from airflow_provider_mysqlcdc.state.drift import frozen_since, pending_drift, read_drift
from airflow_provider_mysqlcdc.state.generations import first_high_watermark
from airflow_provider_mysqlcdc.state.lease import StreamLeases
from airflow_provider_mysqlcdc.state.new_tables import pending_new_tables
from airflow_provider_mysqlcdc.state.registry import STREAM_HISTORY, STREAM_OFFSET, STREAM_PROGRESS, PipelineState
from airflow_provider_mysqlcdc.state.servers import ServerEpochs


def pipeline_status(location: str, source: SourceConfig | None = None) -> dict[str, Any]:
    state = PipelineState(location)
    generation = state.latest()
    drift, ddl = read_drift(state), read_ddl_log(state)
    tables = {}
    for table_id, captured in sorted(generation.tables.items()):
        stream_only = captured.stream_only
        tables[str(table_id)] = {
            "chunk_key": captured.chunk_key,
            # the sink table it writes into: its own, or the one a route shares among shards
            "sink": str(sink_table_id(table_id, captured.table_rule)),
            "how": "stream only, from " + str(captured.splits[0].high_watermark) if stream_only else "snapshot",
            "splits": 0 if stream_only else len(captured.splits),
            "rows_at_snapshot": sum(f.rows for f in captured.splits),
            "staged_splits": sum(1 for f in captured.splits if f.staged),
            "high_watermarks": [str(first_high_watermark(captured)),
                                str(max(f.high_watermark for f in captured.splits))],
            "drift": [{"kind": e.kind.value, "offset": str(e.offset), "reason": e.reason}
                      for e in pending_drift(drift, table_id, captured)],
            "frozen_since": str(since) if (since := frozen_since(drift, table_id, captured)) else None,
            # the latest DDL the stream met of it, and what its schema_changes policy did with each
            "ddl": [{"offset": str(e.offset), "statement": e.statement, "policy": e.policy, "outcome": e.outcome}
                    for e in latest_ddl(ddl, table_id)],
        }
    status: dict[str, Any] = {"state": location, "generation": generation.number, "created": generation.created,
                              "tables": tables, "latest_run": _latest_run(state),
                              "stream": _body(state.read_progress(StreamBatchProgress, STREAM_PROGRESS)),
                              "stream_offset": _body(state.read_progress(StreamOffsetProgress, STREAM_OFFSET)),
                              "stream_history": [p.to_list() for p in (state.read_progress(
                                  StreamHistory, STREAM_HISTORY) or StreamHistory()).points],
                              "servers": [dataclasses.asdict(e) for e in ServerEpochs(state).history()],
                              "lease": _lease(state),
                              # tables a pattern now matches that the stream saw created: the next run captures them
                              "new_tables": [{"table": _shown(t.table), "offset": str(t.offset), "statement": t.statement}
                                             for t in pending_new_tables(state, set(generation.tables))]}
    if source is not None:
        status["server"] = _server_position(source, status["stream_offset"], state)
    return status


def _lease(state: PipelineState) -> dict[str, Any] | None:
    """The stream's lease in force (state/lease.py): who holds it, and whether that stream is alive."""
    current = StreamLeases(state).current()
    if current is None:
        return None
    return {"number": current.lease.number, "holder": current.lease.holder, "live": current.live,
            "description": current.describe() if current.live else f"free: {current.why_free()}"}


def _body(record: Record | None) -> dict[str, Any] | None:
    """A record as a plain dict for the status report."""
    return encode(record) if record else None


def _shown(table: str) -> str:
    """A table as progress records name it (quoted), as the rest of the status shows tables."""
    return str(TableId.parse(table))


def _latest_run(state: PipelineState) -> dict[str, Any] | None:
    runs = []
    for run in state.storage.list_names("progress", "runs"):
        names = state.storage.list_names("progress", "runs", run)
        read = [state.read_progress(RunPlanProgress, f"runs/{run}/{n}") for n in names
                if n.startswith("plan-") and n.endswith(".json")]
        plans = [plan for plan in read if plan is not None]  # one removed since the listing: not shown
        if plans:
            runs.append((max(p.planned_at for p in plans), run, plans, names))
    if not runs:
        return None
    planned_at, run, plans, names = max(runs)
    per_table: dict[str, dict[str, int]] = {}
    for plan in plans:
        for table in plan.chunk_tables:
            per_table.setdefault(_shown(table), {"chunks": 0, "done": 0, "rows": 0})["chunks"] += 1
    for name in names:
        if name.startswith("chunk-") and name.endswith(".json"):
            chunk = state.read_progress(ChunkProgress, f"runs/{run}/{name}")
            if chunk is None:  # removed since the listing
                continue
            entry = per_table.setdefault(_shown(chunk.table), {"chunks": 0, "done": 0, "rows": 0})
            entry["done"] += 1
            entry["rows"] += chunk.rows
    return {"run": run, "planned_at": dt.datetime.fromtimestamp(planned_at, dt.timezone.utc).isoformat(timespec="seconds"),
            "tables": per_table}


def _server_position(source: SourceConfig, committed: dict[str, Any] | None, state: PipelineState) -> dict[str, Any]:
    conn = source.connect()
    try:
        epochs = ServerEpochs(state)
        if not committed:
            return {"binlog_head": str(epochs.head(conn))}
        head, behind = epochs.behind(conn, StreamOffset.from_spark(committed["offset"]).offset)
    finally:
        conn.close()
    return {"binlog_head": str(head), **({"bytes_behind": behind} if behind is not None else {})}


def print_status(location: str, source: SourceConfig | None = None) -> None:
    status = pipeline_status(location, source)
    print(f"pipeline state {status['state']}: registry generation {status['generation']} ({status['created'] or 'none'})")
    if not status["tables"]:
        print("  no tables captured yet")
    for name, table in status["tables"].items():
        staged = f", {table['staged_splits']} staged" if table["staged_splits"] else ""
        print(f"  {name:<32} {table['how']}: {table['splits']} split(s){staged}, {table['rows_at_snapshot']} rows at "
              f"snapshot, high watermarks {table['high_watermarks'][0]} .. {table['high_watermarks'][1]}")
        if table["sink"] != name:
            print(f"  {'':<32} a shard of the sink table {table['sink']} (route)")
        for met in table["ddl"]:
            print(f"  {'':<32} DDL at {met['offset']} ({met['statement'][:80]}), schema_changes={met['policy']}: "
                  f"{met['outcome']}")
        for event in table["drift"]:
            print(f"  {'':<32} {event['kind']} at {event['offset']}: {event['reason']}")
        if table["frozen_since"]:
            print(f"  {'':<32} the sink holds the table's changes before {table['frozen_since']}; none from there are "
                  "applied until it is re-snapshotted (the next DAG run does, if the table exists on the source)")
        elif table["drift"]:
            print(f"  {'':<32} the next DAG run re-snapshots it")
    for new in status["new_tables"]:
        print(f"  {new['table']:<32} not captured yet: matches a table pattern since {new['offset']} "
              f"({new['statement'][:80]}); the next DAG run captures it")
    run = status["latest_run"]
    if run:
        print(f"latest DAG run {run['run']} (planned {run['planned_at']}):")
        for name, t in sorted(run["tables"].items()):
            print(f"  {name:<32} chunks done {t['done']}/{t['chunks']}, {t['rows']} rows")
    stream = status["stream"]
    if stream:
        ago = time.time() - stream["finished_at"]
        last = BinlogOffset.from_dict(stream["last_change_offset"]) if stream.get("last_change_offset") else None
        print(f"stream: batch {stream['batch']} finished {ago:.0f}s ago; {stream['changes_total']} changes applied by "
              f"this stream process; last change applied at {last or '-'}")
        print(f"  the batch took {stream.get('batch_seconds', 0.0):.1f}s; event-time lag at its end "
              f"{stream.get('lag_s', 0.0):.1f}s")
        for table, count in sorted((stream.get("table_changes") or {}).items()):
            print(f"  {table:<32} {count} change(s) applied by this stream process")
        if stream.get("last_change_time_ms"):
            print(f"  newest change applied was written {time.time() - stream['last_change_time_ms'] / 1000:.0f}s ago")
    else:
        print("stream: has not run yet")
    committed = status["stream_offset"]
    if committed:
        offset = StreamOffset.from_spark(committed["offset"])
        print(f"  stream committed up to {offset.offset} (registry generation {offset.generation}), as of "
              f"{time.time() - committed['committed_at']:.0f}s ago (a batch's end, or a heartbeat's)")
        if committed.get("bytes_behind") is not None:
            print(f"  then {committed['bytes_behind']} binlog bytes behind the head "
                  f"({BinlogOffset.from_dict(committed['head'])})")
    lease = status["lease"]
    if lease:
        print(f"  stream lease: {lease['description']}" if lease["live"] else
              f"  stream lease {lease['number']} ({lease['holder']}) {lease['description']}")
    for epoch in status["servers"][1:]:
        print(f"source failed over: from GTID position {epoch['since']} the pipeline reads server_id "
              f"{epoch['server_id']} (server epoch {epoch['epoch']}, followed at {epoch['followed_at']})")
    server = status.get("server")
    if server:
        behind = f"; stream behind by {server['bytes_behind']} binlog bytes" if "bytes_behind" in server else ""
        print(f"server binlog head {server['binlog_head']}{behind}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("state", help="the pipeline's state location (<state_dir>/<dag_id>)")
    args = parser.parse_args(argv)
    try:
        source = SourceConfig.from_env()
    except ConfigurationError:  # no source configured: report from the state alone
        source = None
    print_status(args.state, source)


if __name__ == "__main__":
    main()
