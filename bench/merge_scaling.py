"""Merges whose cost does not grow with the table: one change workload streamed into a sink of 1M
rows and into one of 10M.

Each table (TPC-DS ``customer``-shaped) is snapshotted by the chunk job first, then takes the same
workload, OLTP-shaped: transactions of 100 new rows past the table's end, updates and deletes of
rows inserted a moment before (a hot tail), and nothing else. An available-now stream then applies
it; its streaming seconds are compared. A merge reads and rewrites only the data files whose key
range holds a changed key (Delta keeps statistics of the key columns and ``_cdc_chunk``:
sinks/delta/sink.py), so with changes near the table's end its cost depends on the changes, not on the
rows already there. Updates spread over the whole key range touch a file each, whatever the
table's size: this benchmark does not measure those.
"""

from __future__ import annotations

from pathlib import Path

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from bench.customer_table import add_customer_rows, create_customer_table
from bench.jobs import run_chunk_job, run_stream_job
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
    run_chunk_job(conn, table, work, secrets, f"grow-{rows}-lake")
    start = current_offset(conn)
    changes = run_workload(conn, table, rows)
    run = stream_workload(conn, table, start, work, secrets, f"grow-{rows}")
    assert run["result"]["changes_applied"] == changes, (run["result"], changes)
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE {table.quoted}")
    print(f"merge scaling: {changes} changes into a {rows:,}-row sink in {run['streaming_s']:.1f}s streaming "
          f"({run['total_s']:.1f}s total)", flush=True)
    return {"rows": rows, "changes": changes, "streaming_s": run["streaming_s"], "total_s": run["total_s"],
            "batches": run["result"]["last_batch"] + 1}


def stream_workload(conn, table: TableId, start, work: Path, secrets: Path, name: str, sink_format: str = "delta") -> dict:
    """Stream the workload from ``start`` into the sink the chunk job filled at ``work / f"{name}-lake"``,
    in batches of about 15 transactions, as a stream following a live server commits them: each merge
    and each clustering between them is measured against the table's size."""
    run = run_stream_job(conn, [table], KEY, start, work, secrets, name, sink_format=sink_format, prepare=False,
                         max_batch_events=BATCH_EVENTS)
    print("\n".join(line for line in run["log"].splitlines() if "clustered" in line), flush=True)
    return run


def run_workload(conn, table: TableId, rows: int) -> int:
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
