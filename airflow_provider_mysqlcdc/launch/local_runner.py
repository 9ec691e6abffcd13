"""Running a pipeline's programs as sessions on the worker's shared local Spark Connect server
(launch/local_server.py): ``[mysqlcdc] local_spark = shared`` with a local master and no
``spark_conn_id``.

A program that runs to its end in the task (chunk tasks, the ``available-now`` stream) holds a lease
on the server while it runs, as a Spark Connect session (launch/connect_runner.py): no JVM of its
own. The server's Python workers read the source's password, and the object store's credentials,
from a private file the task writes next to the server for the time of its session (0600, in the
server's 0700 folder) and deletes after; only its path travels in the functions they run. A program
that outlives its task (the ``continuous`` stream) is started with spark-submit as before: it would
hold the server for days, and a JVM start is nothing beside that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.launch.connect_runner import SparkConnectJobRunner
from airflow_provider_mysqlcdc.launch.local_server import LocalSparkServer, ServerRecord
from airflow_provider_mysqlcdc.launch.submit import SparkJobRunner
from airflow_provider_mysqlcdc.protocol.results import DriverInfo
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials

#: the ways programs run on a local master without a ``spark_conn_id`` (``[mysqlcdc] local_spark``)
LOCAL_SPARK_MODES = ("submit", "shared")


class LocalSparkJobRunner(SparkConnectJobRunner):
    """Programs as sessions on the shared local server; detached ones through ``submit``."""

    def __init__(self, server: LocalSparkServer, submit: SparkJobRunner, *, log: Any):
        super().__init__("", conf={}, server_credentials_file="", log=log)
        self.server = server
        self.submit = submit
        self._record: ServerRecord | None = None

    def _url(self) -> str:
        assert self._record is not None, "the URL is asked for inside a lease only"
        return self._record.url

    def run(self, script: str, job_json: str, *, source: SourceConfig, report_folder: str,
            on_driver: Callable[[DriverInfo], None] | None = None,
            object_store: ObjectStoreCredentials | None = None) -> dict[str, Any]:
        with self.server.lease() as lease, session_credentials(lease.session_file, source, object_store) as path:
            self._record, self.server_credentials_file = lease.record, str(path)
            try:
                return super().run(script, job_json, source=source, report_folder=report_folder,
                                   on_driver=on_driver, object_store=object_store)
            finally:
                self._record = None

    def start(self, script: str, job_json: str, *, source: SourceConfig, report_folder: str,
              on_driver: Callable[[DriverInfo], None] | None = None, start_timeout_s: float = 600,
              object_store: ObjectStoreCredentials | None = None) -> None:
        self.submit.start(script, job_json, source=source, report_folder=report_folder, on_driver=on_driver,
                          start_timeout_s=start_timeout_s, object_store=object_store)

    def on_kill(self) -> None:
        super().on_kill()
        self.submit.on_kill()


@contextmanager
def session_credentials(path: Path, source: SourceConfig,
                        object_store: ObjectStoreCredentials | None) -> Iterator[Path]:
    """The private file at ``path`` the server's workers read during one session: written, then
    deleted (a task killed before that: with its lease, by the server's supervisor)."""
    try:
        source.to_private_file(path)
        if object_store:
            object_store.add_to_private_file(path)
        yield path
    finally:
        path.unlink(missing_ok=True)
