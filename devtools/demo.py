"""The demo (the README's main command): the example DAG end to end under live writes.

1. start a throwaway MariaDB (or use --dsn), create sample tables and start random writers;
2. run ``dags/mysqlcdc_example.py`` with ``dag.test()`` (a real Airflow metadata DB in a temporary
   AIRFLOW_HOME): preflight and planning per table, one spark-submit per chunk, collected splits,
   the binlog stream into Delta tables on local disk;
3. stop the writers, let the stream catch up once more (as the next DAG run would);
4. print per-table counts and check the Delta tables equal the source, row for row.

``--core`` runs the CDC core alone instead (no Airflow, no Spark): parallel split reads in threads
and the filtered binlog into memory; it takes seconds.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
from airflow_provider_mysqlcdc.cdc.planning.splitter import SplitOptions, TableSplitter
from airflow_provider_mysqlcdc.cdc.reading.split_reader import SplitReader, SplitReadResult
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from devtools.verify import differences, replay, source_rows
from devtools.workload import RandomWriters, create_sample_tables

log = logging.getLogger("mysqlcdc.demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000, help="rows per sample table (default 20000)")
    parser.add_argument("--split-rows", "--chunk-size", dest="split_rows", type=int, default=5_000,
                        help="rows per split (default 5000; --chunk-size is its old name)")
    parser.add_argument("--readers", type=int, default=2, help="parallel split readers (default 2)")
    parser.add_argument("--writers", type=int, default=2, help="concurrent writer threads (default 2)")
    parser.add_argument("--dsn", help="use this server (mysql://user:pw@host:port) instead of a throwaway one")
    parser.add_argument("--database", default="cdc_demo")
    parser.add_argument("--tables", type=int, default=3, help="sample tables in the DAG run (default 3, at most 5)")
    parser.add_argument("--core", action="store_true", help="the CDC core alone, in memory (no Airflow/Spark)")
    parser.add_argument("--work-dir", help="where AIRFLOW_HOME, Delta tables and state go (default: a temp dir)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pymysqlreplication").setLevel(logging.WARNING)

    demo = run_core if args.core else run_dag_demo
    if args.dsn:
        return demo(SourceConfig.from_url(args.dsn), args)
    from devtools.throwaway_server import ThrowawayMariaDB

    with ThrowawayMariaDB() as server:
        log.info("throwaway MariaDB pid %s on 127.0.0.1:%s", server.pid, server.port)
        return demo(server.root_config(), args)


def run_dag_demo(source: SourceConfig, args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from airflow_provider_mysqlcdc.launch.local_server import LOCAL_SPARK_DIR_VARIABLE, stop_all
    from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_to_rows
    from airflow_provider_mysqlcdc.sinks.factory import open_sink
    from airflow_provider_mysqlcdc.status import print_status
    from devtools.dag_runner import catch_up_stream, example_dag_env, run_dag
    from devtools.workload import SAMPLE_TABLES

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="mysqlcdc-demo-"))
    samples = SAMPLE_TABLES[: max(1, min(args.tables, len(SAMPLE_TABLES)))]
    conn = source.connect()
    tables = create_sample_tables(conn, args.database, rows_per_table=args.rows, tables=samples)
    env = example_dag_env(work / "airflow", source, tables, sink_root=work / "lake", state_dir=work / "state",
                          split_rows=args.split_rows, chunk_rows=2 * args.split_rows)
    # the shared local Spark server the DAG's tasks start (the default): the demo's own, stopped at its end
    env[LOCAL_SPARK_DIR_VARIABLE] = str(work / "local-spark")
    try:
        log.info("running the example DAG with dag.test() (AIRFLOW_HOME=%s) while %d writers change the tables",
                 work / "airflow", args.writers)
        started = time.monotonic()
        with RandomWriters(source, args.database, writers=args.writers, pause_s=0.005, tables=samples) as writers:
            result = run_dag("mysqlcdc_example", env)
            stats = writers.stop()
        print(f"\nDAG run {result['run_id']}: {result['state']} in {time.monotonic() - started:.0f}s while writers "
              f"committed {stats.transactions} transactions ({stats.rows_changed} row changes)")
        for ti in sorted(result["tis"], key=lambda t: (t["task_id"], t["map_index"])):
            print(f"  {ti['task_id']:<40} {ti['label'] or '':<34} {ti['state']}")
        if result["state"] != "success":
            print(result["output"][-4000:])
            return 1
        state = result["xcoms"]["collect_splits[-1]"]["state"]
        catch_up_stream(source, state, work / "lake", work / "spark")
        print(f"\nwhere the pipeline stands (python -m airflow_provider_mysqlcdc.status {state}):")
        print_status(state, source)
        report = run_preflight(source, tables)
        sink = open_sink(SinkSpec(str(work / "lake")))
        print(f"\n{'table':<28}{'chunks':>7}{'delta rows':>12}{'source rows':>13}  equal")
        exact = True
        for table_id in tables:
            schema = report.schemas[table_id]
            captured = {schema.key_of(r): r for r in arrow_to_rows(sink.read(table_id), schema)}
            expected = source_rows(source, schema)
            problem = differences(expected, captured)
            exact &= problem is None
            chunks = sum(1 for ti in result["tis"] if ti["task_id"].endswith(".snapshot") and
                         (ti["label"] or "").startswith(str(table_id)))
            print(f"{str(table_id):<28}{chunks:>7}{len(captured):>12}{len(expected):>13}  "
                  f"{'yes' if problem is None else 'NO: ' + problem}")
        print(f"\nDelta tables under {work / 'lake'}; " + ("all equal the source." if exact else "MISMATCH: see above."))
        return 0 if exact else 1
    finally:
        stop_all(work / "local-spark")


def run_core(source: SourceConfig, args: argparse.Namespace) -> int:
    conn = source.connect()
    tables = create_sample_tables(conn, args.database, rows_per_table=args.rows)
    log.info("created %d sample tables with about %d rows each", len(tables), args.rows)
    started = time.monotonic()
    with RandomWriters(source, args.database, writers=args.writers, pause_s=0.002) as writers:
        report = run_preflight(source, tables)
        plans: dict[TableId, list[SnapshotSplit]] = {}
        for table_id, schema in report.schemas.items():
            plans[table_id] = TableSplitter(conn, schema, SplitOptions(split_rows=args.split_rows)).split()
        results = read_splits_in_parallel(source, report.schemas, plans, args.readers)
        stats = writers.stop()
    end = current_offset(conn)
    snapshot_s = time.monotonic() - started
    replayed = replay(source, report.schemas, results, end)
    log.info("binlog phase: %d changes emitted, %d filtered out (already in their split)",
             replayed.emitted, replayed.skipped)

    print(f"\nSnapshot of {len(tables)} tables in {snapshot_s:.1f}s while writers committed "
          f"{stats.transactions} transactions ({stats.rows_changed} row changes); binlog read up to {end}.\n")
    header = f"{'table':<28}{'splits':>7}{'rows read':>11}{'merged':>8}{'captured':>10}{'source':>9}  equal"
    print(header)
    print("-" * len(header))
    exact = True
    for table_id in tables:
        expected = source_rows(source, report.schemas[table_id])
        captured = replayed.tables[table_id].rows
        problem = differences(expected, captured)
        exact &= problem is None
        table_results = results[table_id]
        print(f"{str(table_id):<28}{len(table_results):>7}{sum(len(r.rows) for r in table_results):>11}"
              f"{sum(r.finished.binlog_events_merged for r in table_results):>8}{len(captured):>10}"
              f"{len(expected):>9}  {'yes' if problem is None else 'NO: ' + problem}")
    print("\nAll captured tables equal the source." if exact else "\nMISMATCH: see above.")
    return 0 if exact else 1


def read_splits_in_parallel(source, schemas, plans, readers: int) -> dict[TableId, list[SplitReadResult]]:
    """Read every split on a pool of threads, each thread with its own readers; log progress."""
    import threading

    local = threading.local()
    opened: list[SplitReader] = []
    total = sum(len(s) for s in plans.values())

    def read(split: SnapshotSplit) -> SplitReadResult:
        if not hasattr(local, "readers"):
            local.readers = {}
        if split.table_id not in local.readers:
            local.readers[split.table_id] = SplitReader(source, schemas[split.table_id])
            opened.append(local.readers[split.table_id])
        return local.readers[split.table_id].read(split)

    results: dict[TableId, list[SplitReadResult]] = {t: [] for t in plans}
    rows = 0
    with ThreadPoolExecutor(max_workers=readers) as pool:
        futures = [pool.submit(read, s) for splits in plans.values() for s in splits]
        for done, future in enumerate(as_completed(futures), start=1):
            result = future.result()
            results[result.finished.split.table_id].append(result)
            rows += result.finished.rows
            if done % max(1, total // 10) == 0 or done == total:
                log.info("snapshot progress: %d/%d chunks done, %d rows", done, total, rows)
    for reader in opened:
        reader.close()
    for table_results in results.values():
        table_results.sort(key=lambda r: r.finished.split.index)
    return results


if __name__ == "__main__":
    sys.exit(main())
