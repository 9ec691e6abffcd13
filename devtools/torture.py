"""A randomized torture run of the stream (``bin/torture --seeds N``; one seed runs in the suite).

On its own MariaDB server: a few tables are snapshotted, then a continuous stream runs while a
seeded script of rounds changes the source and the deployment:

- DML: single- and multi-row transactions of inserts, updates, key-changing updates and deletes,
  and large transactions (every row of a table, or thousands of new rows) that the stream merges in
  pieces and sends through spill files; some transactions are XA: prepared in one round, committed
  or rolled back at the start of the next, after the stream committed a batch in between (so the
  prepare and its outcome lie in different batches, some across a kill -9 or a lost checkpoint);
- DDL: add a nullable column or one with a constant DEFAULT, drop or rename a column, widen INT to
  BIGINT, change a DECIMAL's scale, TRUNCATE in each form, RENAME TABLE away and create the name
  again, DROP and CREATE;
- faults: kill -9 of the stream, a server restart under it, a purge of the binlog it has not read
  (``on_binlog_purged="resnapshot"``), and a deleted checkpoint.

The last table is captured under a rule (a row filter rows move in and out of, a hashed column).
Two tables with the same ids, ``s0`` and ``s1``, are shards routed into one sink table
(``torture.routed``): every DDL above but the type changes reaches them, and each must equal its
source within the shared table.
The stream is given a table pattern (``torture.p\\d+``): in the middle round a table matching it is
created, which the stream must record for the next run, and that run captures it.
Then the invariant: every table the drift record does not name equals the source (the ruled one:
the rows the server returns for the filter, the column hashed; nothing diverges silently); the next run re-snapshots exactly the named tables (as the plan does) and then every
table equals the source. The script is printed with its seed; the same seed gives the same script.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.rules import TableRules
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.progress import StreamOffsetProgress
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import SINK_FORMATS, open_sink
from airflow_provider_mysqlcdc.sinks.routing import sink_table_ids
from airflow_provider_mysqlcdc.state.drift import pending_drift, read_drift
from airflow_provider_mysqlcdc.state.new_tables import pending_new_tables
from airflow_provider_mysqlcdc.state.registry import STREAM_OFFSET, PipelineState
from devtools.snapshot import resnapshot_whole_tables, snapshot_tables
from devtools.spark_submit import SparkSubmit
from devtools.throwaway_server import ThrowawayMariaDB, close_session
from devtools.verify import differences, sink_commits, sink_rows, source_rows

log = logging.getLogger(__name__)

DATABASE = "torture"
#: the last table (DML only) is captured under a rule: its rows where d >= 0 (rows move in and out
#: of it as d changes sign), its column s hashed with this salt
RULE_FILTER = "d >= 0"
SALT = "torture-salt"
#: the stream's table pattern: a table created under it mid-run is captured by the next run
PATTERN = rf"{DATABASE}.p\d+"
#: two shards (the same ids) routed into one sink table; no DDL changes a column's type in them (a
#: Delta table cannot take it, so such a shard stays frozen: tests/integration/test_table_routes.py)
SHARDS, ROUTED = ("s0", "s1"), f"{DATABASE}.routed"
TYPE_CHANGES = ("widen", "decimal_scale")
BASE_COLUMNS = "id INT PRIMARY KEY, v INT, s VARCHAR(40), d DECIMAL(10,2)"
DML, DDL, FAULT = "dml", "ddl", "fault"
DDL_ACTIONS = ("add_nullable", "add_default", "drop_column", "rename_column", "widen", "decimal_scale", "truncate",
               "rename_table", "drop_create")
FAULTS = ("kill9", "server_restart", "purge", "checkpoint_reset")
FAULT_EVERY = 5
#: the share of DML transactions that are XA (prepared, their outcome one round later)
XA_SHARE = 0.25
#: faults a prepared XA transaction is left open across (the others touch the server or its binlog)
XA_CROSSES = ("kill9", "checkpoint_reset")


@dataclass
class TortureReport:
    seed: int
    script: list[str] = field(default_factory=list)
    drifted: list[str] = field(default_factory=list)  # tables the drift record named after the stream
    problems: list[str] = field(default_factory=list)  # invariant violations: empty when the run passed
    clusterings: int = 0  # clustering commits the stream made into the tables (sinks/clustering.py)
    new_tables: list[str] = field(default_factory=list)  # created under the pattern, captured by the next run

    def summary(self) -> str:
        verdict = "PASSED" if not self.problems else "FAILED:\n  " + "\n  ".join(self.problems)
        return (f"seed {self.seed}: {len(self.script)} rounds, re-snapshotted {', '.join(self.drifted) or 'nothing'}, "
                f"new under the pattern {', '.join(self.new_tables) or 'nothing'}, "
                f"{self.clusterings} clustering commit(s); {verdict}")


class Torture:
    def __init__(self, seed: int, work: Path, *, rounds: int = 30, tables: int = 4, rows: int = 200,
                 sink_format: str = "delta"):
        self.seed, self.work, self.rounds, self.rows = seed, work, rounds, rows
        self.sink_format = sink_format
        self.rng = random.Random(seed)
        self.shards = [TableId(DATABASE, name) for name in SHARDS]
        self.tables = [*self.shards, *(TableId(DATABASE, f"t{i}") for i in range(tables))]
        # the last table only ever gets DML: the check before any re-snapshot always has a table to compare
        self.ddl_tables = self.tables[:-1]
        # a fault every FAULT_EVERY rounds, each kind in turn (in a seeded order), so every run has all
        self.faults = list(FAULTS)
        self.rng.shuffle(self.faults)
        self.columns: dict[TableId, dict[str, str]] = {}  # the columns DML may set (name -> int|str|dec)
        self.counter = 0
        self.report = TortureReport(seed)
        self.server = ThrowawayMariaDB(base_dir=work / "mariadb", max_binlog_size=256 * 1024)
        self.ruled = self.tables[-1]
        self.rules = TableRules.parse({self.ruled.quoted: {"hash": ["s"]}}, {self.ruled.quoted: RULE_FILTER},
                                      {rf"{DATABASE}.s\d+": ROUTED})
        self.state = PipelineState(str(work / "state"))
        self.lake = str(work / "lake")
        self.submit = SparkSubmit(master="local[2]", work_dir=work / "spark")
        self.stream: subprocess.Popen[bytes] | None = None
        self.stream_log = work / "stream.log"
        #: the prepared XA transaction whose outcome the next round writes: (xid, outcome, the binlog
        #: offset after its prepare)
        self.prepared: tuple[str, str, BinlogOffset] | None = None
        self.created: list[TableId] = []  # tables created under the pattern

    # --- the run ---------------------------------------------------------------------------------
    def run(self) -> TortureReport:
        self.server.start()
        try:
            self._create_and_snapshot()
            self.source_file = self._source().to_private_file(self.work / "secrets" / "source.json")
            self._write_job("continuous")
            self._start_stream()
            for number in range(self.rounds):
                kind = FAULT if number % FAULT_EVERY == FAULT_EVERY - 1 else self.rng.choices((DML, DDL), (4, 1))[0]
                if number == self.rounds // 2:
                    what = self._create_matching()
                elif number % FAULT_EVERY == FAULT_EVERY - 2 and self.faults[0] in XA_CROSSES:
                    what = self._dml(xa_to_commit=True)  # an XA transaction prepared across the fault
                else:
                    what = getattr(self, f"_{kind}")()
                self.report.script.append(f"{number}: {what}")
                log.info("torture seed %d round %s", self.seed, self.report.script[-1])
            if self.prepared is not None:
                self.report.script.append(f"{self.rounds}: {self._resolve_xa()}")
            self._stop_stream()
            self._catch_up()
            self._check(after_resnapshot=False)
            self._check_new_tables_recorded()
            self._next_run()
            self._catch_up()
            self._check(after_resnapshot=True)
        finally:
            self._stop_stream()
            self.server.stop()
        return self.report

    def _conn(self):
        return self.server.connect_root(DATABASE)

    def _source(self) -> SourceConfig:
        """The server, with the salt of the ruled table's hash."""
        return replace(self.server.root_config(), mask_salt=SALT)

    def _create_and_snapshot(self) -> None:
        conn = self.server.connect_root()
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DATABASE}")
        for table in self.tables:
            self._create(table)
        snapshot_tables(self._source(), self.tables, self.lake, self.state, split_rows=self.rows // 3, rules=self.rules,
                        sink_format=self.sink_format)

    def _create(self, table: TableId) -> None:
        with self._conn().cursor() as cur:
            cur.execute(f"CREATE TABLE {table.quoted} ({BASE_COLUMNS})")
            cur.execute(f"INSERT INTO {table.quoted} SELECT seq, seq, CONCAT('row ', seq), seq / 8 "
                        f"FROM seq_1_to_{self.rows}")
        self.columns[table] = {"v": "int", "s": "str", "d": "dec"}

    # --- rounds ----------------------------------------------------------------------------------
    def _value(self, kind: str) -> object:
        if kind == "int":
            return self.rng.randint(-1000, 10**6)
        if kind == "dec":
            return round(self.rng.uniform(-999, 999), 2)
        return None if self.rng.random() < 0.1 else f"text {self.rng.randint(0, 10**6)}"

    def _resolve_xa(self) -> str:
        """The outcome of the prepared XA transaction, once the stream committed a batch after its
        prepare (a stream that is not running: at once, the prepare stays in the binlog it reads)."""
        assert self.prepared is not None
        xid, outcome, prepared_to = self.prepared
        if self.stream is not None:
            self._wait_for_a_batch(reaching=prepared_to)
        with self._conn().cursor() as cur:
            cur.execute(f"XA {outcome} '{xid}'")
        self.prepared = None
        return f"XA {outcome} '{xid}'; "

    def _dml(self, xa: bool = True, xa_to_commit: bool = False) -> str:
        """A transaction (some XA, or XA committed in the next round: ``xa_to_commit``); ``xa=False``: no XA."""
        resolved = self._resolve_xa() if self.prepared is not None else ""
        return resolved + self._transaction(xa, xa_to_commit)

    def _transaction(self, xa: bool, xa_to_commit: bool) -> str:
        table = self.rng.choice(self.tables)
        conn = self._conn()
        columns = self.columns[table]
        xid = f"xa{self.counter}" if xa_to_commit or (xa and self.rng.random() < XA_SHARE) else None
        self.counter += 1
        with conn.cursor() as cur:
            if xid is None and self.rng.random() < 0.15:  # a large transaction
                if self.rng.random() < 0.5:
                    cur.execute(f"UPDATE {table.quoted} SET v = v + 1")
                    return f"large UPDATE of every row of {table}"
                first = self.rng.randint(10_000, 50_000)
                cur.execute(f"INSERT IGNORE INTO {table.quoted} (id) SELECT seq FROM seq_{first}_to_{first + 2999}")
                return f"large INSERT of 3000 rows into {table}"
            cur.execute("BEGIN" if xid is None else f"XA START '{xid}'")
            ops = []
            if xid is not None:  # a new key: the transaction writes a row, so its prepare is in the binlog
                cur.execute(f"INSERT INTO {table.quoted} (id) VALUES (%s)", (200_000 + self.counter,))
                ops.append("insert")
            for _ in range(self.rng.randint(1, 6)):
                op = self.rng.choice(("insert", "update", "update", "rekey", "delete"))
                key = self.rng.randint(1, self.rows * 2)
                name = self.rng.choice(sorted(columns)) if columns else None
                if op == "insert" or name is None:
                    cur.execute(f"INSERT IGNORE INTO {table.quoted} (id) VALUES (%s)", (key,))
                elif op == "update":
                    cur.execute(f"UPDATE {table.quoted} SET `{name}` = %s WHERE id = %s",
                                (self._value(columns[name]), key))
                elif op == "rekey":
                    cur.execute(f"UPDATE IGNORE {table.quoted} SET id = %s WHERE id = %s",
                                (self.rng.randint(1, self.rows * 2), key))
                else:
                    cur.execute(f"DELETE FROM {table.quoted} WHERE id BETWEEN %s AND %s", (key, key + 2))
                ops.append(op)
            if xid is None:
                cur.execute("COMMIT")
                return f"transaction on {table}: {', '.join(ops)}"
            cur.execute(f"XA END '{xid}'")
            cur.execute(f"XA PREPARE '{xid}'")
        close_session(conn, self._conn())  # the prepared transaction outlives its session, for another to end
        outcome = "COMMIT" if xa_to_commit else self.rng.choice(("COMMIT", "COMMIT", "ROLLBACK"))
        self.prepared = (xid, outcome, current_offset(self._conn()))
        return f"XA transaction '{xid}' prepared on {table}: {', '.join(ops)}"

    def _ddl(self) -> str:
        if self.prepared is not None:  # it holds its rows' locks and its tables' metadata locks
            return self._resolve_xa() + self._ddl()
        table = self.rng.choice(self.ddl_tables)
        action = self.rng.choice(DDL_ACTIONS)
        if table in self.shards and action in TYPE_CHANGES:
            return self._dml()
        columns = self.columns[table]
        self.counter += 1
        extra = sorted(c for c in columns if c not in ("v",))
        with self._conn().cursor() as cur:
            if action == "add_nullable":
                sql = f"ALTER TABLE {table.quoted} ADD COLUMN c{self.counter} VARCHAR(20) NULL"
                columns[f"c{self.counter}"] = "str"
            elif action == "add_default":
                sql = f"ALTER TABLE {table.quoted} ADD COLUMN c{self.counter} INT NOT NULL DEFAULT {self.counter * 7}"
                columns[f"c{self.counter}"] = "int"
            elif action == "drop_column" and extra:
                name = self.rng.choice(extra)
                sql = f"ALTER TABLE {table.quoted} DROP COLUMN `{name}`"
                del columns[name]
            elif action == "rename_column" and extra:
                name = self.rng.choice(extra)
                sql = f"ALTER TABLE {table.quoted} RENAME COLUMN `{name}` TO `r{self.counter}`"
                columns[f"r{self.counter}"] = columns.pop(name)
            elif action == "widen":
                sql = f"ALTER TABLE {table.quoted} MODIFY v BIGINT"
            elif action == "decimal_scale" and "d" in columns:
                sql = f"ALTER TABLE {table.quoted} MODIFY d DECIMAL(12,4)"
            elif action == "truncate":
                sql = self.rng.choice((f"TRUNCATE {table.table}", f"TRUNCATE TABLE {table.quoted}",
                                       f"/* cleanup */ TRUNCATE TABLE `{table.table}`"))
            elif action == "rename_table":
                sql = f"RENAME TABLE {table.quoted} TO {DATABASE}.old{self.counter}"
            elif action == "drop_create":
                sql = f"DROP TABLE {table.quoted}"
            else:
                return self._dml()
            cur.execute(sql)
        if action in ("rename_table", "drop_create"):
            self._create(table)
            sql += f"; CREATE TABLE {table} again with {self.rows} rows"
        return sql

    def _create_matching(self) -> str:
        """A table whose name the stream's pattern matches (with rows, and changed once more)."""
        if self.prepared is not None:  # its locks would hold up the DDL
            return self._resolve_xa() + self._create_matching()
        table = TableId(DATABASE, f"p{self.counter}")
        self.counter += 1
        self._create(table)
        with self._conn().cursor() as cur:
            cur.execute(f"UPDATE {table.quoted} SET v = -v WHERE id % 3 = 0")
        self.created.append(table)
        # read by the stream before any fault (a purge could otherwise take the CREATE it records)
        self._wait_for_a_batch(reaching=current_offset(self._conn()))
        return f"CREATE TABLE {table} (matching {PATTERN}) with {self.rows} rows, then an UPDATE"

    def _fault(self) -> str:
        fault = self.faults.pop(0)
        self.faults.append(fault)
        resolved = self._resolve_xa() if self.prepared is not None and fault not in XA_CROSSES else ""
        self._wait_for_a_batch()
        if fault == "kill9":
            self._kill_stream()
            self._start_stream()
        elif fault == "server_restart":
            self.server.stop()
            self.server.start()
        elif fault == "checkpoint_reset":
            self._kill_stream()
            shutil.rmtree(self.state.checkpoint, ignore_errors=True)
            self._start_stream()
        else:  # purge what the (stopped) stream has not read yet
            self._kill_stream()
            self._dml(xa=False)
            self.server.purge_binlogs()
            self._start_stream()
        return f"{resolved}fault: {fault}" + (" (an XA transaction prepared across it)" if self.prepared else "")

    # --- the stream ------------------------------------------------------------------------------
    def _write_job(self, mode: str) -> None:
        job = StreamJob(state=self.state.location, sink=SinkSpec(self.lake, self.sink_format), mode=mode, trigger_interval_s=0.5, max_batch_bytes=512 * 1024, inline_bytes=64 * 1024, max_apply_changes=700, retry_budget_s=120, on_binlog_purged="resnapshot", cluster_after_files=2, table_patterns=[PATTERN])
        (self.work / "stream.json").write_text(job.to_json())

    def _start_stream(self) -> None:
        self.stream = self.submit.start("binlog_stream.py", ["--job", str(self.work / "stream.json")],
                                        self.source_file, self.stream_log)
        self._stream_started = time.time()

    def _wait_for_a_batch(self, timeout_s: float = 240, reaching: BinlogOffset | None = None) -> None:
        """Until the running stream has committed a batch since it started (so faults hit a stream at
        work), one that ends at or after ``reaching`` if given."""
        deadline = time.monotonic() + timeout_s
        while True:
            progress = self.state.read_progress(StreamOffsetProgress, STREAM_OFFSET)
            if progress and progress.committed_at > self._stream_started and (
                    reaching is None or progress.offset.offset >= reaching):
                return
            if self.stream is None or self.stream.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"seed {self.seed}: the stream stopped or made no progress:\n"
                                   + self.stream_log.read_text(errors="replace")[-4000:])
            time.sleep(0.2)

    def _kill_stream(self) -> None:
        if self.stream is not None and self.stream.poll() is None:
            os.killpg(self.stream.pid, signal.SIGKILL)
            self.stream.wait()
        self.stream = None

    def _stop_stream(self) -> None:
        if self.stream is not None and self.stream.poll() is not None:
            raise RuntimeError(f"seed {self.seed}: the continuous stream died:\n"
                               + self.stream_log.read_text(errors="replace")[-4000:])
        self._kill_stream()

    def _catch_up(self) -> None:
        self._write_job("available-now")
        self.submit.run("binlog_stream.py", ["--job", str(self.work / "stream.json")], self.source_file)

    # --- the invariant ---------------------------------------------------------------------------
    def _pending(self) -> list[TableId]:
        registry, drift = self.state.latest(), read_drift(self.state)
        return [t for t in self.tables if pending_drift(drift, t, registry.tables.get(t))]

    def _check(self, *, after_resnapshot: bool) -> None:
        pending = [] if after_resnapshot else self._pending()
        if not after_resnapshot:
            self.report.drifted = [str(t) for t in pending]
        for table in self.tables:
            if table in pending:
                continue
            schema = load_table_schema(self._conn(), table)
            expected = source_rows(self.server.root_config(), schema)
            schema = self.rules.captured(schema, "id")  # a shard's rows: those of the routed table naming it
            if table == self.ruled:  # the rule's rows, computed here: the filter by the server, the hash by hmac
                with self._conn().cursor() as cur:
                    cur.execute(f"SELECT id FROM {table.quoted} WHERE {RULE_FILTER}")
                    kept = {(key,) for (key,) in cur.fetchall()}
                expected = {k: {**row, "s": None if row["s"] is None else hmac.new(
                    SALT.encode(), row["s"].encode(), hashlib.sha256).hexdigest()}
                    for k, row in expected.items() if k in kept}
            problem = differences(expected, sink_rows(self.lake, schema, sink_format=self.sink_format))
            if problem is not None:
                when = "after the re-snapshot" if after_resnapshot else "not named by the drift record"
                self.report.problems.append(f"{table} ({when}): {problem}")
        if after_resnapshot:
            routed = sink_table_ids((t, self.rules.for_table(t)[0]) for t in self.tables)
            sink = open_sink(SinkSpec(str(self.lake), self.sink_format))
            self.report.clusterings = sum(sink_commits(sink, table, "cluster") for table in routed)

    def _check_new_tables_recorded(self) -> None:
        recorded = {TableId.parse(t.table) for t in pending_new_tables(self.state, set(self.state.latest().tables))}
        if recorded != set(self.created):
            self.report.problems.append(f"the stream recorded {sorted(map(str, recorded))} as new under the pattern, "
                                        f"not the tables created: {sorted(map(str, self.created))}")

    def _next_run(self) -> None:
        """What the next DAG run does: a staged whole-table re-snapshot of the tables the drift record
        names, in a new generation; then the tables created under the pattern, snapshotted into the
        sink and added in another."""
        resnapshot_whole_tables(self._source(), self.state, self._pending())
        snapshot_tables(self._source(), self.created, self.lake, self.state, split_rows=self.rows // 3, adding=True,
                        sink_format=self.sink_format)
        self.tables += self.created
        self.report.new_tables = [str(t) for t in self.created]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="how many seeds to run (from --first-seed on)")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--sink-format", choices=list(SINK_FORMATS), default="delta", help="the sink tables' format")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    failed = 0
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        work = Path(tempfile.mkdtemp(prefix=f"mysqlcdc-torture-{seed}-"))
        try:
            report = Torture(seed, work, rounds=args.rounds, sink_format=args.sink_format).run()
        except Exception as exc:  # noqa: BLE001 - one seed's crash is its failure, the others still run
            report = TortureReport(seed, problems=[f"{type(exc).__name__}: {exc}"])
        print("\n".join([f"--- seed {seed} script", *report.script, report.summary()]), flush=True)
        (work / "report.json").write_text(json.dumps(report.__dict__, indent=1))
        if report.problems:
            failed += 1
            print(f"kept {work} for inspection", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{args.seeds - failed} of {args.seeds} seeds passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
