"""Merges of random keys over whole tables, as an OLTP table gets them: copy-on-write beside
merge-on-read, into a small and a large sink table, each snapshotted first, on Delta and on Iceberg.

Each table (an orders-like shape: BIGINT key, two texts, a DECIMAL, a DATETIME, an INT) is written as
the snapshot writes it (one data file per split of ``SPLIT_ROWS`` rows), once per format and merge
mode. Each takes the same ``BATCHES`` batches of ``CHANGES`` changes to keys drawn uniformly over
the whole table (70% updates, 15% deletes, 15% inserts of new keys), merged through the sink writer
exactly as the stream merges a micro-batch. Per batch: wall seconds, CPU seconds of this process
(every thread: delta-rs merges in Rust threads; from its CPU clock, ``_cpu_seconds``), and the rows the batch wrote into new
data files per row it changed (copy-on-write rewrites every file holding a changed key). Iceberg's
copy-on-write runs on the small table only: pyiceberg's delete reads every file it rewrites into
memory, which on the large table is the whole table at every batch.
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.iceberg.sink import IcebergSink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from devtools.verify import duckdb_with

SIZES = (100_000, 10_000_000)
MODES = ("copy-on-write", "merge-on-read")
FORMATS = ("delta", "iceberg")
#: Iceberg copy-on-write runs on tables of at most this many rows (module doc)
ICEBERG_COPY_ON_WRITE_ROWS = 1_000_000
CHANGES = 1_000
BATCHES = 16
SPLIT_ROWS = 250_000
T = TableId("bench", "orders")
ID = Column("id", "bigint", "bigint(20)", False)
SCHEMA = TableSchema(T, (
    ID,
    Column("customer", "varchar", "varchar(60)", True, charset="utf8mb4", collation="utf8mb4_general_ci"),
    Column("status", "varchar", "varchar(16)", True, charset="utf8mb4", collation="utf8mb4_general_ci"),
    Column("amount", "decimal", "decimal(12,2)", True, numeric_precision=12, numeric_scale=2),
    Column("placed", "datetime", "datetime", True),
    Column("quantity", "int", "int(11)", True),
), ("id",))
_SNAPSHOT_AT = BinlogOffset("mysql-bin.000001", 4)


def bench_random_merges(work: Path, sizes: tuple[int, ...] = SIZES, formats: tuple[str, ...] = FORMATS) -> dict:
    """The merge batches of each format, size and mode, then the read cost (``bench_read_cost``)."""
    runs = []
    for sink_format in formats:
        for rows in sizes:
            for mode in MODES:
                if sink_format == "iceberg" and mode == "copy-on-write" and rows > ICEBERG_COPY_ON_WRITE_ROWS:
                    continue
                lake = work / f"random-merges-{sink_format}-{rows}-{mode}"
                sink = open_sink(SinkSpec(str(lake), sink_format, merge_mode=mode))
                _snapshot(sink, rows)
                runs.append({"format": sink_format, "rows": rows, "mode": mode, "batches": _merge_batches(sink, rows)})
                shutil.rmtree(lake, ignore_errors=True)
    return {"changes": CHANGES, "runs": runs, "read_cost": bench_read_cost(work)}


def _snapshot(sink: Sink, rows: int) -> None:
    sink.prepare(SCHEMA)
    writer = SinkWriter(sink, SCHEMA, "id", KeyOrdering(ID))
    for index, start in enumerate(range(0, rows, SPLIT_ROWS)):
        end = min(rows, start + SPLIT_ROWS)
        split = SnapshotSplit(T, index, "id", start or None, end if end < rows else None)
        writer.write_split_table(FinishedSplit(split, _SNAPSHOT_AT), _rows(start, end))
    print(f"random merges: {rows:,}-row table snapshotted in {len(range(0, rows, SPLIT_ROWS))} files", flush=True)


def _rows(start: int, end: int) -> pa.Table:
    ids = np.arange(start, end, dtype=np.int64)
    return pa.table({
        "id": ids,
        "customer": pa.array([f"customer-{i % 99991}" for i in ids.tolist()]),
        "status": pa.array(np.array(["new", "paid", "shipped", "done"])[ids % 4]),
        "amount": pa.array([Decimal(i % 100000) / 100 for i in ids.tolist()], pa.decimal128(12, 2)),
        "placed": pa.array(ids * 1_000_000 + 1_600_000_000_000_000, pa.timestamp("us")),
        "quantity": pa.array(ids % 50, pa.int32()),
    })


def _merge_batches(sink: Sink, rows: int) -> list[dict]:
    writer = SinkWriter(sink, SCHEMA, "id", KeyOrdering(ID))
    mode = sink.merge_mode_of(T)
    rng = random.Random(rows)
    next_key, position = rows, 10
    results = []
    for batch_id in range(BATCHES):
        records = []
        for key in rng.sample(range(rows), CHANGES):
            position += 1
            offset = BinlogOffset("mysql-bin.000002", position * 100)
            draw = rng.random()
            if draw < 0.15:
                records.append(ChangeRecord(Operation.CREATE, T, None, _row(next_key), offset))
                next_key += 1
            elif draw < 0.30:
                records.append(ChangeRecord(Operation.DELETE, T, _row(key), None, offset))
            else:
                records.append(ChangeRecord(Operation.UPDATE, T, _row(key), {**_row(key), "status": "changed"}, offset))
        before = _commits(sink)
        cpu, wall = _cpu_seconds(), time.perf_counter()
        apply_change_batch({T: writer}, records, app_id="bench", batch_id=batch_id)
        wall, cpu = time.perf_counter() - wall, _cpu_seconds() - cpu
        written = _rows_written(sink, before)
        results.append({"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "rows_written": written})
        print(f"random merges: {type(sink).__name__} {mode} batch {batch_id} into {rows:,} rows: {wall:.2f}s wall, {cpu:.2f} CPU-s, "
              f"{written:,} rows written", flush=True)
    return results


def _row(key: int) -> dict:
    return {"id": key, "customer": f"customer-{key % 99991}", "status": "new", "amount": Decimal(key % 100000) / 100,
            "placed": None, "quantity": key % 50}


def _cpu_seconds() -> float:
    """This process's CPU seconds, every thread (delta-rs merges in Rust threads, pyiceberg reads in a
    pool), from its CPU clock: /proc's counters tick every 10 ms, and a merge-on-read batch takes one
    or two ticks, so their ratios were mostly rounding."""
    return time.process_time()


def _commits(sink: Sink) -> int:
    """The table's commits so far: its Delta version, or its Iceberg snapshots' count."""
    if isinstance(sink, IcebergSink):
        table = sink.open_table(T)
        assert table is not None
        return len(table.snapshots())
    return DeltaTable(sink.table_uri(T)).version()


def _rows_written(sink: Sink, since: int) -> int:
    """Rows in the data files the commits after ``since`` (``_commits``) added (a Delta file re-added
    under a new deletion vector is not written again; Iceberg's delete files hold no rows)."""
    if isinstance(sink, IcebergSink):
        table = sink.open_table(T)
        assert table is not None
        return sum(int(s.summary.additional_properties.get("added-records", 0)) for s in table.snapshots()[since:]
                   if s.summary is not None)
    uri = sink.table_uri(T)
    total = 0
    for version in range(since + 1, DeltaTable(uri).version() + 1):
        for line in (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
            action = json.loads(line)
            if "add" in action and not action["add"].get("deletionVector"):
                total += json.loads(action["add"]["stats"])["numRecords"]
    return total


def random_merges_report(result: dict) -> list[str]:
    runs = {(r.get("format", "delta"), r["rows"], r["mode"]): r["batches"] for r in result["runs"]}
    sizes = sorted({r["rows"] for r in result["runs"]})
    formats = [f for f in FORMATS if any(key[0] == f for key in runs)]
    changes = result["changes"]

    def typical(key: tuple[str, int, str], field: str) -> float:
        """Of the batches after the first (the first one of a writer builds merge-on-read's key index);
        CPU seconds as their mean (the total over the batches)."""
        batches = runs[key][1:]
        return statistics.fmean(b[field] for b in batches) if field == "cpu_s" else statistics.median(b[field] for b in batches)

    lines = [f"## Random-key merges: copy-on-write beside merge-on-read, {sizes[0]:,} and {sizes[-1]:,} rows", "",
             f"Each table snapshotted first (files of {SPLIT_ROWS:,} rows), then {BATCHES} batches of {changes:,} "
             "changes to keys drawn over the whole table (70% updates, 15% deletes, 15% inserts), merged as the "
             "stream merges a micro-batch. Median (CPU: mean) of the batches after the first (the first of a merge-on-read "
             "writer reads every file's keys into its key index, once per stream: its own column); CPU seconds of "
             "the merging process, every thread. Iceberg's copy-on-write only on the small table (pyiceberg's "
             "delete would read the whole large table into memory at every batch).", "",
             "| format | table rows | merge mode | wall s | CPU s | rows written per changed row | first batch CPU s |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for key in sorted(runs, key=lambda k: (formats.index(k[0]), k[1], k[2])):
        lines.append(f"| {key[0]} | {key[1]:,} | {key[2]} | {typical(key, 'wall_s'):.2f} | {typical(key, 'cpu_s'):.3f} | "
                     f"{typical(key, 'rows_written') / changes:,.2f} | {runs[key][0]['cpu_s']:.3f} |")
    small, large = sizes[0], sizes[-1]
    lines.append("")
    for sink_format in formats:
        mor_small, mor_large = (sink_format, small, "merge-on-read"), (sink_format, large, "merge-on-read")
        if mor_small not in runs or mor_large not in runs:
            continue
        ratio = typical(mor_large, "cpu_s") / max(typical(mor_small, "cpu_s"), 1e-3)
        written = max(b["rows_written"] for (f, _, mode), batches in runs.items()
                      if f == sink_format and mode == "merge-on-read" for b in batches)
        lines += [f"- {sink_format} merge-on-read, {large:,} rows costs <= 2x {small:,} rows (CPU): "
                  f"{'met' if ratio <= 2 else 'MISSED'} ({ratio:.2f}x)",
                  f"- {sink_format} merge-on-read rows written per changed row <= 2: "
                  f"{'met' if written <= 2 * changes else 'MISSED'} ({written / changes:.2f} at most)"]
        for rows in (large, small):
            cow = (sink_format, rows, "copy-on-write")
            if cow in runs:
                lines.append(f"- {sink_format} copy-on-write costs "
                             f"{typical(cow, 'cpu_s') / max(typical((sink_format, rows, 'merge-on-read'), 'cpu_s'), 1e-3):.1f}x "
                             f"merge-on-read at {rows:,} rows (CPU)")
                break
    return lines + ["", *(read_cost_report(result["read_cost"]) if "read_cost" in result else [])]


READ_ROWS = 2_000_000
DELETED_SHARE = 0.10
READ_REPEATS = 7


def bench_read_cost(work: Path, rows: int = READ_ROWS, formats: tuple[str, ...] = FORMATS) -> dict:
    """Per format, a full scan of a table a tenth of whose rows its deletes (deletion vectors, position
    deletes) delete, beside the same table compacted (every delete folded into the files, checked),
    through two readers of each format: median seconds of ``READ_REPEATS``."""
    found: dict = {"rows": rows, "deleted": int(rows * DELETED_SHARE)}
    for sink_format in formats:
        lake = work / f"read-cost-{sink_format}"
        sink = open_sink(SinkSpec(str(lake), sink_format, merge_mode="merge-on-read"))
        _snapshot(sink, rows)
        writer = SinkWriter(sink, SCHEMA, "id", KeyOrdering(ID))
        doomed = random.Random(1).sample(range(rows), found["deleted"])
        for batch_id, start in enumerate(range(0, len(doomed), 20_000)):
            records = [ChangeRecord(Operation.DELETE, T, _row(key), None,
                                    BinlogOffset("mysql-bin.000002", 100 + start + i))
                       for i, key in enumerate(doomed[start:start + 20_000])]
            apply_change_batch({T: writer}, records, app_id="bench", batch_id=batch_id)
        assert _deleting_files(sink) > 0, "the deletes were not merged by deletes"
        with_deletes = _scans(sink, rows - len(doomed))
        # fold every delete in: any file with a deleted row is rewritten (the default folds a fifth and more)
        while sink.cluster(T, min_files=1, fold_share=1e-9) is not None:
            pass
        assert _deleting_files(sink) == 0, "compaction left deletes"
        found[sink_format] = {"with_deletes": with_deletes, "compacted": _scans(sink, rows - len(doomed))}
        shutil.rmtree(lake, ignore_errors=True)
    return found


def _deleting_files(sink: Sink) -> int:
    """The table's files that delete rows: Delta data files with a deletion vector, Iceberg delete files."""
    if isinstance(sink, IcebergSink):
        table = sink.open_table(T)
        assert table is not None
        return table.inspect.delete_files().num_rows
    uri = sink.table_uri(T)
    return sum(1 for live in DeltaLog(uri).files(DeltaTable(uri)).values() if live.vector is not None)


def _scans(sink: Sink, expected: int) -> dict:
    if isinstance(sink, IcebergSink):
        con = duckdb_with("avro", "iceberg")
        table = sink.open_table(T)
        assert table is not None
        readers = {"pyiceberg": lambda: table.scan().to_arrow().num_rows,
                   "duckdb": lambda: con.execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}')"
                                                 ).to_arrow_table().num_rows}
    else:
        con = duckdb_with("delta")
        uri = sink.table_uri(T)
        readers = {"delta-rs": lambda: pa.table(DeltaTable(uri).scan()).num_rows,
                   "duckdb": lambda: con.execute(f"SELECT * FROM delta_scan('{uri}')").to_arrow_table().num_rows}
    found = {}
    for name, scan in readers.items():
        times = []
        for _ in range(READ_REPEATS):
            cpu, wall = _cpu_seconds(), time.perf_counter()
            assert scan() == expected, name
            times.append((time.perf_counter() - wall, _cpu_seconds() - cpu))
        found[name] = {"wall_s": round(statistics.median(t[0] for t in times), 3),
                       "cpu_s": round(statistics.median(t[1] for t in times), 3)}
    con.close()
    return found


def read_cost_report(result: dict) -> list[str]:
    if "with_vectors" in result:  # a run before the formats were measured apart: Delta's alone
        result = {"rows": result["rows"], "deleted": result["deleted"],
                  "delta": {"with_deletes": result["with_vectors"], "compacted": result["compacted"]}}
    lines = [f"## Reading a table with deletes: {result['rows']:,} rows, {result['deleted']:,} deleted by deletion "
             "vectors (Delta) or position-delete files (Iceberg)",
             "", f"A full scan (every column, into Arrow), median of {READ_REPEATS}, beside the same table after "
             "compaction folded every delete into the files (checked: no vector or delete file left).", "",
             "| format | reader | with deletes: wall s | CPU s | compacted: wall s | CPU s | ratio (wall) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    verdicts = []
    for sink_format in (f for f in FORMATS if f in result):
        for reader, timed in result[sink_format]["with_deletes"].items():
            compacted = result[sink_format]["compacted"][reader]
            ratio = timed["wall_s"] / max(compacted["wall_s"], 1e-3)
            lines.append(f"| {sink_format} | {reader} | {timed['wall_s']:.2f} | {timed['cpu_s']:.2f} | "
                         f"{compacted['wall_s']:.2f} | {compacted['cpu_s']:.2f} | {ratio:.2f}x |")
            verdicts.append(f"- {sink_format}, {reader}: a scan with 10% of the rows deleted within 1.3x of the "
                            f"compacted table's: {'met' if ratio <= 1.3 else 'MISSED'} ({ratio:.2f}x)")
    return lines + [""] + verdicts + [""]
