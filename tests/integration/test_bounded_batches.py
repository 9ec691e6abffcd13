"""Memory bounded by configuration: limited micro-batches that end at transaction ends, and a
transaction larger than every limit streamed through spill files and merged in pieces."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.cdc.binlog import ranges
from airflow_provider_mysqlcdc.cdc.binlog.listing import binlog_events
from airflow_provider_mysqlcdc.cdc.binlog.ranges import batch_end, listed_batch_end
from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader, TransactionCommitted
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, stream_only_split
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state.registry import PipelineState
from devtools.spark_submit import SparkSubmit
from devtools.verify import source_rows

from .helpers import assert_same_rows, delta_rows

pytestmark = pytest.mark.integration


def _commits(source, start: BinlogOffset, end: BinlogOffset) -> list[BinlogOffset]:
    return [i.offset for i in BinlogReader(source, start=start, end=end, key_columns={})
            if isinstance(i, TransactionCommitted)]


def _write_transactions(conn, table: TableId) -> None:
    """Small transactions of three row events, a DDL, one transaction of 20,000 rows, small ones again."""
    with conn.cursor() as cur:
        for n in range(6):
            cur.execute("BEGIN")
            for i in range(3):
                cur.execute(f"INSERT INTO {table.quoted} (id, v) VALUES (%s, 0)", (n * 10 + i,))
            cur.execute("COMMIT")
        cur.execute(f"ALTER TABLE {table.quoted} ADD COLUMN note VARCHAR(20) NULL")
        cur.execute(f"INSERT INTO {table.quoted} (id, v) SELECT seq, 1 FROM seq_1000_to_20999")
        for n in range(3):
            cur.execute(f"UPDATE {table.quoted} SET v = v + 1 WHERE id = %s", (n,))


def test_batches_end_at_the_first_transaction_end_after_the_limit(mysql_server, database):
    conn = mysql_server.connect(database)
    table = TableId(database, "t")
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v INT)")
    start = current_offset(conn)
    _write_transactions(conn, table)
    head = current_offset(conn)
    commits = _commits(mysql_server.admin, start, head)
    assert len(commits) == 6 + 1 + 1 + 3

    def batches(**limit: int) -> list[BinlogOffset]:
        ends, at = [], start
        while at < head:
            at = batch_end(conn, at, head, **limit)
            ends.append(at)
        return ends

    # one event is always exceeded: every transaction (the DDL and the 20,000-row one too) is a batch
    ends = batches(max_events=1)
    assert ends[:len(commits)] == commits and ends[len(commits):] in ([], [head])
    # a byte limit: each batch ends at a commit, holds at least the limit, and never cuts a transaction
    ends = batches(max_bytes=1500)
    assert set(ends) <= set(commits) | {head} and len(commits) // 3 <= len(ends) < len(commits)
    assert batches() == [head] and batches(max_events=10**9) == [head]
    # limits the whole range is under end it at the head, told without listing it
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {start.position}", (start.file,))
        events = sum(1 for row in cur.fetchall() if int(row[4]) <= head.position)
    assert start.file == head.file and batches(max_events=events + 1) == [head]
    assert batches(max_bytes=head.position - start.position + 1) == [head]
    assert batches(max_events=events // 2)[0] < head and batches(max_bytes=(head.position - start.position) // 2)[0] < head


def _write_every_kind_of_group(mysql_server, conn, table: TableId, rng: random.Random) -> None:
    """About 1.5 MiB of binlog (the suite's files rotate at 1 MiB): small transactions, statements of
    their own (DDL), a transaction with a savepoint (a statement inside it), a large transaction, XA
    groups, and on MariaDB transactions of a second GTID domain."""
    with conn.cursor() as cur:
        for n in range(1500):
            roll = rng.random()
            if roll < 0.01:
                cur.execute(f"ALTER TABLE {table.quoted} COMMENT %s", (f"c{n}",))
            elif roll < 0.02:
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO {table.quoted} (id, v) VALUES (%s, 0)", (10**6 + n,))
                cur.execute("SAVEPOINT s")
                cur.execute(f"UPDATE {table.quoted} SET v = v + 1 WHERE id = %s", (10**6 + n,))
                cur.execute("COMMIT")
            elif roll < 0.025:
                cur.execute(f"INSERT INTO {table.quoted} (id, v) SELECT seq + %s, 2 FROM seq_1_to_3000", (2 * 10**6 + n * 10**4,))
            elif roll < 0.03:
                cur.execute(f"XA START 'x{n}'")
                cur.execute(f"INSERT INTO {table.quoted} (id, v) VALUES (%s, 3)", (3 * 10**6 + n,))
                cur.execute(f"XA END 'x{n}'")
                cur.execute(f"XA PREPARE 'x{n}'")
                cur.execute(f"XA COMMIT 'x{n}'")
            else:
                if mysql_server.info.is_mariadb:
                    cur.execute(f"SET SESSION gtid_domain_id = {1 if roll < 0.1 else 0}")
                cur.execute("BEGIN")
                for i in range(rng.randint(1, 4)):
                    cur.execute(f"INSERT INTO {table.quoted} (id, v) VALUES (%s, 1)", (n * 10 + i,))
                cur.execute("COMMIT")
        cur.execute("SET SESSION gtid_domain_id = 0" if mysql_server.info.is_mariadb else "DO 0")


def test_a_batch_end_found_by_skipping_to_the_limit_is_the_one_listing_every_event_finds(mysql_server, database):
    """The whole class of batch ends: chains of batches under random byte and event limits over every
    kind of binlog group, across a rotation, each end (its GTID position too) the same as listing
    every event from the batch's start; and most of them found without that listing."""
    rng = random.Random(int(os.environ.get("MYSQLCDC_TEST_SEED", "48")))
    conn = mysql_server.connect(database)
    table = TableId(database, "t")
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v INT)")
    start = current_offset(conn)
    _write_every_kind_of_group(mysql_server, conn, table, rng)
    head = current_offset(conn)
    assert head.file != start.file  # a rotation inside the range

    # limits that fall on a statement of its own (a DDL, its group begun before the limit), and on a
    # statement inside a transaction (the savepoint), from the start
    listed = [e for e in binlog_events(conn, start, head) if e.file == start.file]
    statements = [(n, e) for n, e in enumerate(listed) if e.kind == "query"
                  and e.info.upper() not in ("BEGIN", "COMMIT") and not e.info.upper().startswith("XA")]
    assert any("SAVEPOINT" in e.info.upper() for _, e in statements) and any("ALTER" in e.info for _, e in statements)
    on_statements = [limit for n, e in statements[:6]
                     for limit in ({"max_bytes": e.position + 1 - start.position}, {"max_events": n + 1})]

    random_limits = [{"max_bytes": rng.choice([1, 700, 40_000, 300_000, 900_000])} for _ in range(6)] + \
                    [{"max_events": rng.choice([1, 3, 2500, 9000])} for _ in range(4)] + \
                    [{"max_bytes": 250_000, "max_events": 6000}]
    compared, unlisted = [0, 0], [0, 0]  # [random limits, limits on statements]
    for limit in random_limits + on_statements:
        at, kind = start, int(limit in on_statements)
        for _ in range(1 if kind else 4):
            if at >= head:
                break
            expected, got = listed_batch_end(conn, at, head, **limit), batch_end(conn, at, head, **limit)
            assert (got, got.gtid_set, got.server_id) == (expected, expected.gtid_set, expected.server_id), (limit, at)
            compared[kind] += 1
            max_bytes, max_events = limit.get("max_bytes", 0), limit.get("max_events", 0)
            unlisted[kind] += ranges._within_limits(conn, at, head, max_bytes, max_events) or \
                ranges._jumped_end(conn, at, head, max_bytes, max_events) is not None
            at = expected
    # batch_end's own ways, without the listing: under both limits, or skipped to the limit's event
    # (an event limit past the start's file, or a limit on a statement, is listed)
    assert compared[0] >= 20 and unlisted[0] >= compared[0] * 3 // 4, (compared, unlisted)


def test_a_transaction_larger_than_every_limit_streams_in_pieces_and_survives_a_kill(mysql_server, cdc_user,
                                                                                     database, tmp_path):
    conn = mysql_server.connect(database)
    table = TableId(database, "t")
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table.quoted} (id INT PRIMARY KEY, v INT, pad VARCHAR(100))")
    start = current_offset(conn)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table.quoted} SELECT seq, 0, REPEAT('x', 80) FROM seq_1_to_30000")
        cur.execute(f"UPDATE {table.quoted} SET v = v + 1, pad = REPEAT('y', 90)")  # one transaction
        cur.execute(f"DELETE FROM {table.quoted} WHERE id % 7 = 0")
        for i in range(5):
            cur.execute(f"INSERT INTO {table.quoted} VALUES (%s, 9, 'late')", (50_000 + i,))
    head = current_offset(conn)
    state = PipelineState(str(tmp_path / "state"))
    state.commit({table: CapturedTable("id", [stream_only_split(table, "id", start)])})
    job = StreamJob(state=state.location, sink=SinkSpec(str(tmp_path / "lake")), max_batch_bytes=256 << 10, inline_bytes=128 << 10, max_apply_changes=4000,
                    stream_engine="structured-streaming")  # its checkpoint's offsets are read below
    (tmp_path / "stream.json").write_text(job.to_json())
    source_file = cdc_user.to_private_file(tmp_path / "secrets" / "source.json")
    submit = SparkSubmit(master="local[2]", work_dir=tmp_path / "spark")

    # killed once a few pieces of the first big transaction are committed, then run to the end
    log_file = tmp_path / "first.log"
    proc = submit.start("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file, log_file)
    delta_log = tmp_path / "lake" / database / "t" / "_delta_log"
    deadline = time.monotonic() + 240
    while len(list(delta_log.glob("*.json"))) < 4:  # table creation + 3 pieces
        assert proc.poll() is None and time.monotonic() < deadline, log_file.read_text()[-3000:]
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    submit.run("binlog_stream.py", ["--job", str(tmp_path / "stream.json")], source_file)

    schema = load_table_schema(conn, table)
    assert_same_rows(table, source_rows(mysql_server.admin, schema), delta_rows(tmp_path / "lake", schema))
    # the 30,000-row transactions were merged in pieces of at most 4,000 changes, each its own commit
    merges = [json.loads(line)["commitInfo"] for f in sorted(delta_log.glob("*.json"))
              for line in f.read_text().splitlines() if '"commitInfo"' in line]
    assert sum(m.get("operation") == "MERGE" for m in merges) >= 2 * 30_000 // 4000
    # batches ended at transaction ends (the checkpoint's offsets), and what a task decoded beyond
    # its inline budget came through spill files, all removed once applied
    ends = [json.loads(f.read_text().splitlines()[-1]) for f in (Path(job.checkpoint) / "offsets").iterdir()
            if f.name.isdigit()]
    commits = _commits(mysql_server.admin, start, head)
    ends = [BinlogOffset(e["file"], int(e["pos"])) for e in ends]
    assert len(ends) >= 3 and all(e in commits or (e > commits[-1] and not _commits(mysql_server.admin, commits[-1], e))
                                  for e in ends), (ends, commits)
    assert sum(int(n) for n in re.findall(r"(\d+) spill file\(s\)", submit.last_log)) > 0, submit.last_log[-3000:]
    assert not list((tmp_path / "state" / "spill").glob("*"))
