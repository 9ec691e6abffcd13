"""A merge-on-read writer killed (SIGKILL) exactly between writing a batch's files (its data file and
its deletion vector file) and committing them: the files are invisible to every reader, the batch
replayed lands exactly once, and vacuum deletes the orphans once they are old enough."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.data_files import ORPHAN_MIN_AGE_S
from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog
from airflow_provider_mysqlcdc.sinks.delta.maintenance import maintain_table
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from tests.unit.sinks.delta.test_deletion_vectors import duckdb_rows
from tests.unit.sinks.delta.test_merge_on_read import SCHEMA, T, held, snapshotted
from tests.unit.stream.harness import delete, insert, update

REPO = Path(__file__).resolve().parents[4]


def the_batch() -> list[ChangeRecord]:
    """Updates and deletes of rows in both snapshot files, and an insert: a vector and a data file."""
    return [update(T, 20, {"id": 3, "v": "a"}, {"id": 3, "v": "b"}), delete(T, 21, id=1500, v="a"),
            update(T, 22, {"id": 1700, "v": "a"}, {"id": 1700, "v": "c"}), insert(T, 23, id=9000, v="new")]


def merge_and_die(root: str) -> None:
    """In a child process: merge ``the_batch`` and be killed by SIGKILL at its commit, its files written."""
    def killed(*_args, **_kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    DeltaLog.commit = killed  # type: ignore[method-assign]
    sink = open_sink(SinkSpec(root, "delta", merge_mode="merge-on-read"))
    apply_change_batch({T: SinkWriter(sink, SCHEMA, "id", KeyOrdering(SCHEMA.columns[0]))}, the_batch(), app_id="app",
                       batch_id=1)


def folder(uri: str) -> set[str]:
    return {str(p.relative_to(uri)) for p in Path(uri).rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def test_a_merge_killed_before_its_commit_leaves_invisible_files_and_its_replay_lands_once(tmp_path):
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    uri = writer.sink.table_uri(T)
    before, version, rows = folder(uri), DeltaTable(uri).version(), held(writer)
    child = subprocess.run([sys.executable, "-c", "import sys; from tests.unit.sinks.delta.test_merge_killed import "
                            "merge_and_die; merge_and_die(sys.argv[1])", str(tmp_path / "lake")], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr
    written = folder(uri) - before
    assert any(p.endswith(".parquet") for p in written) and any(p.endswith(".bin") for p in written), written
    assert DeltaTable(uri).version() == version
    assert held(writer) == rows and {r["id"]: r["v"] for r in duckdb_rows(uri)} == rows

    apply_change_batch({T: writer}, the_batch(), app_id="app", batch_id=1)  # the stream replays it
    expected = {**{k: v for k, v in rows.items() if k != 1500}, 3: "b", 1700: "c", 9000: "new"}
    assert held(writer) == expected and {r["id"]: r["v"] for r in duckdb_rows(uri)} == expected
    assert DeltaTable(uri).version() == version + 1


def test_vacuum_deletes_files_no_commit_named_only_once_they_are_old_enough(tmp_path):
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    uri = writer.sink.table_uri(T)
    apply_change_batch({T: writer}, the_batch()[:2], app_id="app", batch_id=1)
    committed = folder(uri)
    orphans = {"merged-killed.parquet", "deletion_vector_killed.bin"}
    for name in orphans:
        (Path(uri) / name).write_bytes(b"a file a killed writer left")
    policy = MaintenancePolicy(compact=False, checkpoint=False, vacuum_retention_s=0)
    maintain_table(writer.sink, T, policy)
    assert folder(uri) == committed | orphans  # young: a writer may be about to commit them
    old = time.time() - 2 * ORPHAN_MIN_AGE_S
    for name in orphans:
        os.utime(Path(uri) / name, (old, old))
    maintain_table(writer.sink, T, policy)
    assert folder(uri) == committed
    assert held(writer)[3] == "b"
