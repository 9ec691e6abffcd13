"""Assertions shared by the integration tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.devtools.verify import Rows, differences
from airflow_provider_mysqlcdc.devtools.verify import sink_rows as delta_rows  # noqa: F401 (the tests' name)


def assert_same_rows(table_id: TableId, expected: Rows, actual: Rows,
                     evidence: Callable[[], str] | None = None) -> None:
    problem = differences(expected, actual)
    if problem is not None:
        raise AssertionError(f"{table_id}: {problem}" + ("\n" + evidence() if evidence else ""))


def transactions_between(source: SourceConfig, start: BinlogOffset, end: BinlogOffset) -> int:
    """How many transactions (of any table) the binlog holds in (start, end].

    Stream offsets are compared with the server head this way, not byte for byte: MariaDB writes
    a Binlog_checkpoint event asynchronously after a rotation, so the head can move by a few bytes
    with no transaction behind it."""
    from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader, TransactionCommitted

    if end <= start:
        return 0
    reader = BinlogReader(source, start=start, end=end, key_columns={})
    return sum(isinstance(item, TransactionCommitted) for item in reader)


class SecretWatch:
    """Samples every process's argv, and the environment of Spark's processes, for a secret while
    a test runs; ``files_holding`` then searches what the pipeline wrote.

    Spark's processes are the JVMs spark-submit starts and the Python workers they fork: they must
    get the source password only through the private file ``MYSQLCDC_SOURCE_FILE`` names."""

    def __init__(self, secret: str, interval_s: float = 0.5):
        self.secret = secret.encode()
        self.interval_s = interval_s
        self.found: list[str] = []
        self._reported: set[str] = set()  # pids, each reported once
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "SecretWatch":
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.found

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples += 1
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit() or proc.name in self._reported:
                    continue
                try:
                    argv = (proc / "cmdline").read_bytes()
                    if self.secret in argv:
                        self.found.append(f"argv of process {proc.name}: {argv[:200]!r}")
                        self._reported.add(proc.name)
                    if b"org.apache.spark" in argv or b"pyspark" in argv:
                        if self.secret in (proc / "environ").read_bytes():
                            self.found.append(f"environment of Spark process {proc.name}: {argv[:200]!r}")
                            self._reported.add(proc.name)
                except OSError:  # the process ended meanwhile
                    continue


def files_holding(secret: str, root: Path) -> list[str]:
    """Files under ``root`` whose bytes contain ``secret``, except the private credential files
    tests write on purpose (in folders named ``secrets``)."""
    needle = secret.encode()
    return [str(p) for p in root.rglob("*")
            if p.is_file() and "secrets" not in p.relative_to(root).parts and needle in p.read_bytes()]
