"""Running a pipeline's programs as Spark Connect sessions, through the apache-spark provider's
``SparkConnectHook`` (a ``spark_connect`` connection: host, port, user id as login, token as
password, ``use_ssl`` in the extras).

The program's driver side runs in a plain Python process with no JVM, and its Spark side on a
long-running Spark Connect server (``start-connect-server.sh`` of the same Spark version), which
gets the package as a session artifact (spark/connect.py):

- ``run`` (chunk tasks, the ``available-now`` stream) runs the program in the task's own process:
  a chunk task costs a session (well under a second), not a JVM start. ``on_kill`` interrupts
  everything the session runs.
- ``start`` (the ``continuous`` stream) starts the program detached, as its own Python process
  (``--spark-connect``) that outlives the task and reports through its report folder like a
  spark-submit driver (spark/report.py); it is stopped through that folder (launch/supervision.py).

What travels to the server: the job (splits, locations) and the source's settings without the
password inside the Python objects that run there. The server's workers read the password, and the
object store's credentials, from a private file on the server that the connection names
(``server_credentials_file`` in its extras: spark/connect.py). The connection's token is never
logged: only the server's address is; a detached program reads its URL from its private file, not
its arguments.
"""

from __future__ import annotations

import importlib
import logging
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.protocol.results import DriverInfo
from airflow_provider_mysqlcdc.spark.connect import ConnectSession, connect_session, server_address
from airflow_provider_mysqlcdc.spark.starting import SparkStart
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials

#: the loggers of the package: their lines go to the task log while a program runs in the task's process
PACKAGE_LOGGER = "airflow_provider_mysqlcdc"


class SparkConnectJobRunner:
    """The programs of ``spark/jobs/`` as Spark Connect sessions: one at a time, interruptible."""

    def __init__(self, conn_id: str, *, conf: Mapping[str, str], server_credentials_file: str, log: Any,
                 python: str = sys.executable):
        self.conn_id = conn_id
        self.conf = dict(conf)
        self.server_credentials_file = server_credentials_file
        self.log = log
        self.python = python
        self._session: Any = None

    def _url(self) -> str:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        return SparkConnectHook(self.conn_id).get_connection_url()

    def run(self, script: str, job_json: str, *, source: SourceConfig, report_folder: str,
            on_driver: Callable[[DriverInfo], None] | None = None,
            object_store: ObjectStoreCredentials | None = None) -> dict[str, Any]:
        """Run ``script``'s work with ``job_json`` in a session of its own, in this process; its result.
        ``object_store``: unused, the operator installed it in this process, and the server's workers
        read theirs from the server's file."""
        program = importlib.import_module(f"airflow_provider_mysqlcdc.spark.jobs.{Path(script).stem}")
        app_name, work = program.prepare(job_json, source=source, server_file=self.server_credentials_file)
        url = self._url()
        try:
            with connect_session(url, self.conf) as spark:
                self._session = spark
                self.log.info("%s: Spark Connect session %s on %s", app_name, spark.session_id, server_address(url))
                started = SparkStart.of(spark, url)
                if on_driver:  # the task's Spark UI link: the server's application
                    on_driver(started.driver())
                with _package_log_to(self.log):
                    return work(started)
        finally:
            self._session = None

    def start(self, script: str, job_json: str, *, source: SourceConfig, report_folder: str,
              on_driver: Callable[[DriverInfo], None] | None = None, start_timeout_s: float = 600,
              object_store: ObjectStoreCredentials | None = None) -> None:
        """Start ``script`` detached, as a Python process of its own holding its session: return once
        it is up. It removes its private folder (the credentials file) when it ends."""
        from airflow_provider_mysqlcdc.launch.submit import (
            job_arguments,
            output_tail,
            prepare_program,
            program_environment,
            wait_for_driver,
        )
        from airflow_provider_mysqlcdc.spark.packaging import spark_job_script
        from airflow_provider_mysqlcdc.spark.report import ReportWatcher

        work = Path(tempfile.mkdtemp(prefix="mysqlcdc-"))  # 0700: the credentials file lives here
        report = ReportWatcher(report_folder)
        secrets = prepare_program(work, source, object_store, report, job_json)
        ConnectSession(self._url(), self.conf, self.server_credentials_file).add_to_private_file(secrets)
        env = program_environment(object_store.variables if object_store else ())
        with open(work / "driver.log", "ab") as output:  # the program's own errors; its log goes to the report
            process = subprocess.Popen(
                [self.python, str(spark_job_script(script)),
                 *job_arguments(report, secrets, ["--remove-source-folder", "--spark-connect"])],
                env=env, stdout=output, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
        threading.Thread(target=process.wait, name="reap-detached-program", daemon=True).start()  # no zombie

        def driver_started(info: DriverInfo) -> None:
            self.log.info("Spark Connect program %s is up (pid %d on %s)%s", script, info.pid, info.host,
                          f", Spark UI {info.ui_url}" if info.ui_url else "")
            if on_driver:
                on_driver(info)

        def ended() -> bool:
            return process.poll() is not None

        wait_for_driver(report, f"Spark Connect program {script}", ended=ended,
                        problem=lambda: (f"it exited with code {process.returncode}: "
                                         f"{output_tail(work / 'driver.log', 40)}") if ended() else None,
                        on_line=lambda line: self.log.info("%s", line), on_driver=driver_started,
                        timeout_s=start_timeout_s, on_timeout=process.kill)

    def on_kill(self) -> None:
        """Interrupt everything the task's own session runs (its Spark jobs on the server stop at
        once). A detached program is stopped through its report folder by its operator."""
        session = self._session
        if session is not None:
            session.interruptAll()


@contextmanager
def _package_log_to(log: Any) -> Iterator[None]:
    """The package's log lines (progress of the work) into ``log``, the task log, while it runs."""

    class ToTaskLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            log.info("%s", record.getMessage())

    logger = logging.getLogger(PACKAGE_LOGGER)
    handler, level = ToTaskLog(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
