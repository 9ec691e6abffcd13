"""Iceberg beside Delta (``bin/bench --only sink-formats``): the same source rows and the same binlog
range written into each table format in turn, in one run, so the ratios compare the sinks and not
the machine's moods.

1. the snapshot of a TPC-DS ``customer``-shaped table by the chunk job (work after start-up and end to end);
2. the UPDATE burst: one UPDATE of every row of a narrow table, one available-now stream;
3. the mixed workload (bench/mixed_workload.py): many small transactions over ten tables, half of them wide;
4. merge scaling (bench/merge_scaling.py): one OLTP-shaped change workload into a sink and into one ten
   times larger, each snapshotted by the chunk job first, in batches with clustering between them.

Each run is one spark-submit in local mode; peak RSS per role is sampled for every one. Delta runs
first, Iceberg second, each time on the same data; both sinks are in the same local lake layout (the
Iceberg tables in the embedded SQLite catalog).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from bench import merge_scaling, mixed_workload
from bench.customer_table import create_customer_table, update_burst
from bench.jobs import run_chunk_job, run_stream_job
from bench.memory import ROLES
from devtools.throwaway_server import ThrowawayMariaDB

FORMATS = ("delta", "iceberg")
_MIB = 2**20


def bench_sink_formats(server: ThrowawayMariaDB, work: Path, secrets: Path, *, rows: int, burst: int,
                       merge_sizes: tuple[int, int]) -> dict:
    conn = server.connect_root()
    return {"run_at": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
            "snapshot": _snapshot(conn, work, secrets, rows), "burst": _burst(server, work, secrets, burst),
            "mixed": _mixed(server, work, secrets),
            "merge": [_merge(server, work, secrets, size) for size in merge_sizes]}


def _snapshot(conn, work: Path, secrets: Path, rows: int) -> dict:
    table = TableId("bench", "formats_customer")
    create_customer_table(conn, table, rows)
    out: dict = {"rows": rows}
    for sink_format in FORMATS:
        run = run_chunk_job(conn, table, work, secrets, f"formats-snapshot-{sink_format}", sink_format=sink_format)
        out[sink_format] = {"seconds": run["ours_work_s"], "total_s": run["ours_total_s"], "peak_bytes": run["peak_bytes"]}
        print(f"sink formats, snapshot of {rows:,} rows into {sink_format}: {run['ours_work_s']:.1f}s work, "
              f"{run['ours_total_s']:.1f}s end to end", flush=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE {table.quoted}")
    return out


def _streams(name: str, changes: int, stream: Callable[[str, str], dict]) -> dict:
    """The same binlog range streamed into each format by ``stream(sink_format, run name)``, each run
    checked to apply all ``changes``: seconds, batch times and peak RSS per format."""
    out: dict = {"changes": changes}
    for sink_format in FORMATS:
        run = stream(sink_format, f"{name}-{sink_format}")
        assert run["result"]["changes_applied"] == changes, (sink_format, run["result"], changes)
        out[sink_format] = _figures(run)
        print(f"sink formats, {name} into {sink_format}: {changes:,} changes in {run['streaming_s']:.1f}s streaming "
              f"({out[sink_format]['merging_s']:.1f}s merging), {run['total_s']:.1f}s end to end", flush=True)
    return out


def _figures(run: dict) -> dict:
    return {"seconds": run["streaming_s"], "total_s": run["total_s"], "peak_bytes": run["peak_bytes"],
            **mixed_workload.batch_times(run["log"])}


def _burst(server: ThrowawayMariaDB, work: Path, secrets: Path, burst: int) -> dict:
    table = TableId("bench", "formats_burst")
    conn, start, _ = update_burst(server, table, burst)
    return _streams("formats-burst", burst, lambda sink_format, name: run_stream_job(
        conn, [table], "id", start, work, secrets, name, sink_format=sink_format))


def _mixed(server: ThrowawayMariaDB, work: Path, secrets: Path) -> dict:
    conn = mixed_workload.create_tables(server)
    start = current_offset(conn)
    _, changes = mixed_workload.run_workload(conn)
    tables = mixed_workload.NARROW + mixed_workload.WIDE
    return _streams("formats-mixed", changes, lambda sink_format, name: run_stream_job(
        conn, tables, "id", start, work, secrets, name, sink_format=sink_format))


def _merge(server: ThrowawayMariaDB, work: Path, secrets: Path, rows: int) -> dict:
    conn = server.connect_root()
    table = TableId("bench", f"formats_grow_{rows}")
    create_customer_table(conn, table, rows)
    for sink_format in FORMATS:
        run_chunk_job(conn, table, work, secrets, f"formats-grow-{rows}-{sink_format}-lake", sink_format=sink_format)
    start = current_offset(conn)
    changes = merge_scaling.run_workload(conn, table, rows)
    out = {"rows": rows, **_streams(f"formats-grow-{rows}", changes, lambda sink_format, name: (
        merge_scaling.stream_workload(conn, table, start, work, secrets, name, sink_format)))}
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE {table.quoted}")
    return out


def sink_formats_report(result: dict) -> list[str]:
    snap, burst, mixed, merges = result["snapshot"], result["burst"], result["mixed"], result["merge"]
    header = ("| workload | format | seconds | rows or changes/s | Iceberg / Delta rate | merging seconds | "
              "end to end seconds | " + " | ".join(f"{role} MiB" for role in ROLES) + " |")
    lines = ["## Iceberg beside Delta: the same data into each format", "",
             f"Run {result.get('run_at', 'with the rest')} (`bin/bench --only sink-formats` runs this part alone). "
             "Each workload is written into a Delta table and then into an Iceberg table (embedded SQLite catalog) "
             "from the same source rows or the same binlog range, one spark-submit each. Seconds: the chunk job's work "
             "after start-up, or the stream's streaming part; merging: the stream batches' time spent writing into the "
             "sink (the rest is reading the binlog). Peak RSS per role of each spark-submit, sampled every 0.2 s.", "",
             header, "|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(ROLES)]
    rows = [(f"snapshot, {snap['rows']:,} rows", snap, snap["rows"]),
            (f"UPDATE burst, {burst['changes']:,} rows", burst, burst["changes"]),
            (f"mixed workload, {mixed['changes']:,} changes", mixed, mixed["changes"])]
    rows += [(f"merges into a {m['rows']:,}-row sink, {m['changes']:,} changes", m, m["changes"]) for m in merges]
    ratios = {}
    for label, figures, count in rows:
        ratio = figures["delta"]["seconds"] / figures["iceberg"]["seconds"]
        ratios[label] = ratio
        for sink_format in FORMATS:
            f = figures[sink_format]
            merging = f"{f['merging_s']:.1f}" if "merging_s" in f else "-"
            lines.append(f"| {label} | {sink_format} | {f['seconds']:.1f} | {count / f['seconds']:,.0f} | "
                         f"{f'{ratio:.2f}' if sink_format == 'iceberg' else '1.00'} | {merging} | {f['total_s']:.1f} | "
                         + " | ".join(f"{f['peak_bytes'][role] / _MIB:,.0f}" for role in ROLES) + " |")
    small, large = merges[0], merges[-1]

    def growth(sink_format: str) -> float:
        return (large["changes"] / large[sink_format]["seconds"]) / (small["changes"] / small[sink_format]["seconds"])

    def peak(figures: dict, sink_format: str) -> int:
        return sum(figures[sink_format]["peak_bytes"].values())

    lines += ["", "- Iceberg's rate as a share of Delta's: " + "; ".join(f"{label}: {ratio:.2f}x"
                                                                       for label, ratio in ratios.items())]
    lines.append(f"- changes/s into the {large['rows']:,}-row sink as a share of the {small['rows']:,}-row one: "
                 f"Delta {growth('delta'):.2f}x, Iceberg {growth('iceberg'):.2f}x")
    lines.append("- peak RSS of all roles, Iceberg / Delta: "
                 + "; ".join(f"{label}: {peak(f, 'iceberg') / peak(f, 'delta'):.2f}x" for label, f, _ in rows))
    return lines + [""]
