"""Running a pipeline's chunk program as a Spark Connect session, through the apache-spark
provider's ``SparkConnectHook`` (a ``spark_connect`` connection: host, port, user id as login, token
as password, ``use_ssl`` in the extras).

The program's driver side runs in the task's own process, with no JVM: the task opens a session
on a long-running Spark Connect server (``start-connect-server.sh`` of the same Spark version),
ships the package zip to it as a session artifact, and runs the program's work there; Spark's
side (the partitions' SELECTs) runs on the server's executors. A chunk task then costs a session
(well under a second), not a JVM start. The session ends with the task; ``on_kill`` interrupts
everything it runs.

What travels to the server: the job's splits and the source settings inside the partitions' Python
function (as with spark-submit, where that function goes to the executors). The connection's token
is never logged: only the server's address is.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.protocol.results import DriverInfo
from airflow_provider_mysqlcdc.spark.submit import CONNECT_MODE_VARIABLES
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials

#: the programs that run as a Spark Connect session (the stream does not, yet)
CONNECT_PROGRAMS = ("snapshot_chunk.py",)
#: the loggers of the package: their lines go to the task log while a program runs in the task's process
PACKAGE_LOGGER = "airflow_provider_mysqlcdc"


class SparkConnectJobRunner:
    """One program of ``spark/jobs/`` at a time, as a Spark Connect session; interruptible."""

    def __init__(self, conn_id: str, *, conf: Mapping[str, str], log: Any):
        self.conn_id = conn_id
        self.conf = dict(conf)
        self.log = log
        self._session: Any = None

    def run(self, script: str, job_json: str, *, source: SourceConfig, report_folder: str,
            on_driver: Callable[[DriverInfo], None] | None = None,
            object_store: ObjectStoreCredentials | None = None) -> dict[str, Any]:
        """Run ``script``'s work with ``job_json`` in a session of its own; its result. The object
        store's credentials, installed in this process, serve the work's driver side as they are."""
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
        from pyspark.sql import SparkSession

        from airflow_provider_mysqlcdc.spark.packaging import build_py_files_zip

        if script not in CONNECT_PROGRAMS:
            self.start(script, job_json)  # refuses, naming the way out
        program = importlib.import_module(f"airflow_provider_mysqlcdc.spark.jobs.{Path(script).stem}")
        app_name, work = program.prepare(job_json, source=source)
        url = SparkConnectHook(self.conn_id).get_connection_url()
        builder = SparkSession.builder.remote(url)
        for key, value in self.conf.items():
            builder = builder.config(key, value)
        folder = Path(tempfile.mkdtemp(prefix="mysqlcdc-connect-"))
        saved = {name: os.environ.get(name) for name in CONNECT_MODE_VARIABLES}
        try:
            spark = self._session = builder.create()
            self.log.info("%s: Spark Connect session %s on %s", app_name, spark.session_id, urlparse(url).netloc)
            spark.addArtifacts(str(build_py_files_zip(folder / "airflow_provider_mysqlcdc.zip")), pyfile=True)
            with _package_log_to(self.log):
                return work(spark)
        finally:
            if self._session is not None:
                self._session.stop()
                self._session = None
            shutil.rmtree(folder, ignore_errors=True)
            for name, value in saved.items():  # pyspark marks the process as a Connect client: undo it
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def start(self, script: str, job_json: str, **kwargs: Any) -> None:
        raise ConfigurationError(
            f"Spark connection {self.conn_id!r} is a Spark Connect server, which runs chunk tasks but not yet the "
            f"stream ({script}): give the stream task a 'spark' connection (stream_spark_conn_id= in "
            "mysqlcdc_pipeline, or spark_conn_id= of MySqlCdcStreamOperator).")

    def on_kill(self) -> None:
        """Interrupt everything the session runs (its Spark jobs on the server stop at once)."""
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
