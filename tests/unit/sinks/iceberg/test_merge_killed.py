"""An Iceberg merge-on-read writer killed (SIGKILL) exactly between writing a batch's files (its
position-delete file and its data file) and committing them: the files are invisible to every
reader, the batch replayed lands exactly once, and orphan removal deletes them once old enough."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.data_files import ORPHAN_MIN_AGE_S
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from tests.unit.sinks.iceberg.test_merge_on_read import SCHEMA, T, duckdb_rows, held, sink_of, snapshotted
from tests.unit.stream.harness import delete, insert, update

REPO = Path(__file__).resolve().parents[4]


def the_batch() -> list[ChangeRecord]:
    """Updates and deletes of rows in both snapshot files, and an insert: delete files and a data file."""
    return [update(T, 20, {"id": 3, "v": "a"}, {"id": 3, "v": "b"}), delete(T, 21, id=1500, v="a"),
            update(T, 22, {"id": 1700, "v": "a"}, {"id": 1700, "v": "c"}), insert(T, 23, id=9000, v="new")]


def merge_and_die(root: str) -> None:
    """In a child process: merge ``the_batch`` and be killed by SIGKILL at its catalog commit, its
    files written."""
    from pyiceberg.table import Transaction

    def killed(*_args, **_kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    Transaction.commit_transaction = killed  # type: ignore[method-assign]
    sink = open_sink(SinkSpec(root, "iceberg", merge_mode="merge-on-read"))
    apply_change_batch({T: SinkWriter(sink, SCHEMA, "id", KeyOrdering(SCHEMA.columns[0]))}, the_batch(), app_id="app",
                       batch_id=1)


def data_folder(writer: SinkWriter) -> set[Path]:
    return set(Path(sink_of(writer).open_table(T).location().removeprefix("file://"), "data").rglob("*.parquet"))


def duckdb_rows_of(writer: SinkWriter) -> dict[int, str]:
    return duckdb_rows(sink_of(writer).open_table(T).metadata_location.removeprefix("file://"))


def test_a_merge_killed_before_its_commit_leaves_invisible_files_and_its_replay_lands_once(tmp_path):
    writer = snapshotted(tmp_path / "lake", "merge-on-read")
    before, snapshot, rows = data_folder(writer), sink_of(writer).open_table(T).current_snapshot().snapshot_id, held(writer)
    child = subprocess.run([sys.executable, "-c", "import sys; from tests.unit.sinks.iceberg.test_merge_killed import "
                            "merge_and_die; merge_and_die(sys.argv[1])", str(tmp_path / "lake")], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr
    orphans = data_folder(writer) - before
    assert len(orphans) >= 2, orphans  # a position-delete file and the data file of the new images
    assert sink_of(writer).open_table(T).current_snapshot().snapshot_id == snapshot
    assert held(writer) == rows and duckdb_rows_of(writer) == rows

    apply_change_batch({T: writer}, the_batch(), app_id="app", batch_id=1)  # the stream replays it
    expected = {**{k: v for k, v in rows.items() if k != 1500}, 3: "b", 1700: "c", 9000: "new"}
    assert held(writer) == expected and duckdb_rows_of(writer) == expected

    old = time.time() - 2 * ORPHAN_MIN_AGE_S
    for path in orphans:
        os.utime(path, (old, old))
    sink_of(writer).maintain(T, MaintenancePolicy(compact=False, checkpoint=False, vacuum_retention_s=0))
    assert not any(path.exists() for path in orphans)
    assert held(writer) == expected and duckdb_rows_of(writer) == expected
