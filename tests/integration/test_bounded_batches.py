"""Memory bounded by configuration: limited micro-batches that end at transaction ends, and a
transaction larger than every limit streamed through spill files and merged in pieces."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.ranges import batch_end
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
    job = StreamJob(state=state.location, sink=SinkSpec(str(tmp_path / "lake")), max_batch_bytes=256 << 10, inline_bytes=128 << 10, max_apply_changes=4000)
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
