"""Merges whose cost does not grow with the table: one change workload streamed into a sink of 1M
rows and into one of 10M.

Each table (TPC-DS ``customer``-shaped) is snapshotted by the chunk job first, then takes the same
workload, OLTP-shaped: transactions of 100 new rows past the table's end, updates and deletes of
rows inserted a moment before (a hot tail), and nothing else. An available-now stream then applies
it; its streaming seconds are compared. A merge reads and rewrites only the data files whose key
range holds a changed key (Delta keeps statistics of the key columns and ``_cdc_chunk``:
sinks/delta.py), so with changes near the table's end its cost depends on the changes, not on the
rows already there. Updates spread over the whole key range touch a file each, whatever the
table's size: this benchmark does not measure those.
"""

from __future__ import annotations

import time
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.planning.splitter import ChunkSplitter, SplitOptions
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob, StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, stream_only_split
from airflow_provider_mysqlcdc.state.registry import PipelineState
from bench.customer_table import add_customer_rows, create_customer_table
from devtools.spark_submit import SparkSubmit
from devtools.throwaway_server import ThrowawayMariaDB

SIZES = (1_000_000, 10_000_000)
#: transactions of 100 new rows; every second one also updates the previous one's rows, every tenth
#: deletes the rows of five transactions before
TRANSACTIONS = 300
KEY = "c_customer_sk"
BATCH_EVENTS = 100


def bench_merge_scaling(server: ThrowawayMariaDB, work: Path, secrets: Path) -> dict:
    return {"runs": [_one_size(server, work, secrets, rows) for rows in SIZES]}


def _one_size(server: ThrowawayMariaDB, work: Path, secrets: Path, rows: int) -> dict:
    conn = server.connect_root()
    table = TableId("bench", f"grow_{rows}")
    create_customer_table(conn, table, rows)
    lake, state = work / f"grow-lake-{rows}", work / f"grow-state-{rows}"
    schema = load_table_schema(conn, table)
    splits = ChunkSplitter(conn, schema, SplitOptions(chunk_size=1_000_000)).split()
    submit = SparkSubmit(master="local[2]", work_dir=work / "spark")
    (work / "grow-chunk.json").write_text(ChunkJob(table=str(table), splits=splits, sink_root=str(lake),
                                                   partitions_per_split=4).to_json())
    submit.run("snapshot_chunk.py", ["--job", str(work / "grow-chunk.json")], secrets)
    start = current_offset(conn)
    changes = _workload(conn, table, rows)
    PipelineState(str(state)).commit({table: CapturedTable(KEY, [stream_only_split(table, KEY, start)])})
    # batches of about 15 transactions, as a stream following a live server commits them: each merge
    # and each clustering between them is measured against the table's size
    (work / "grow-stream.json").write_text(StreamJob(state=str(state), sink_root=str(lake),
                                                     max_batch_events=BATCH_EVENTS).to_json())
    started = time.monotonic()
    result = submit.run("binlog_stream.py", ["--job", str(work / "grow-stream.json")], secrets)
    total = time.monotonic() - started
    assert result["changes_applied"] == changes, (result, changes)
    print("\n".join(line for line in submit.last_log.splitlines() if "clustered" in line), flush=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE {table.quoted}")
    print(f"merge scaling: {changes} changes into a {rows:,}-row sink in {result['streaming_seconds']:.1f}s streaming "
          f"({total:.1f}s total)", flush=True)
    return {"rows": rows, "changes": changes, "streaming_s": result["streaming_seconds"], "total_s": total,
            "batches": result["last_batch"] + 1}


def _workload(conn, table: TableId, rows: int) -> int:
    """Run the workload on ``table`` (keys 1..rows); the number of row changes it made."""
    changes = 0
    with conn.cursor() as cur:
        for n in range(TRANSACTIONS):
            first = rows + 100 * n + 1
            add_customer_rows(cur, table, first, first + 99)
            changes += 100
            if n % 2:
                changes += cur.execute(f"UPDATE {table.quoted} SET c_birth_year = c_birth_year + 1 "
                                       f"WHERE {KEY} BETWEEN {first - 100} AND {first - 1}")
            if n % 10 == 9:
                changes += cur.execute(f"DELETE FROM {table.quoted} WHERE {KEY} BETWEEN {first - 500} AND {first - 401}")
            conn.commit()
    return changes


def merge_scaling_report(result: dict) -> list[str]:
    small, large = result["runs"]
    rate = {r["rows"]: r["changes"] / r["streaming_s"] for r in result["runs"]}
    ratio = rate[large["rows"]] / rate[small["rows"]]
    lines = [f"## Merges as the sink grows: one change workload into a {small['rows']:,}-row and a "
             f"{large['rows']:,}-row sink", "",
             f"{TRANSACTIONS} transactions of 100 new rows past the table's end; every second one updates the rows "
             "of the one before, every tenth deletes 100 rows inserted five transactions before. Each sink was "
             f"snapshotted by the chunk job first; an available-now stream applies the workload in batches of at most "
             f"{BATCH_EVENTS} binlog events (clustering the files between them, as it does by default).", "",
             "| sink rows | row changes | batches | streaming seconds | row changes/s |", "|---:|---:|---:|---:|---:|"]
    for run in result["runs"]:
        lines.append(f"| {run['rows']:,} | {run['changes']:,} | {run.get('batches', 1)} | {run['streaming_s']:.1f} | "
                     f"{rate[run['rows']]:,.0f} |")
    verdict = "met" if ratio >= 0.7 else "MISSED"
    return lines + ["", f"- changes/s into the {large['rows']:,}-row sink >= 0.7 x into the {small['rows']:,}-row "
                        f"sink: {verdict} ({ratio:.2f}x)", ""]
