"""Spark Connect sessions: opening one for a program of ``spark/jobs/``, and what differs in one.

A program's driver side then runs in a plain Python process (the task's own, or the detached
stream's) with no JVM; the Spark side runs on a long-running Spark Connect server. The package
travels to the server as a session artifact, so the server's Python workers import it like
executors do with ``--py-files``.

What cannot travel as a file: the server's Python workers (the binlog source's planner and its
readers, the stream's ``foreachBatch`` function) do not see the task's private credentials file, so
on a Connect session the objects that run there carry the source's settings and the object store's
credentials themselves (spark/stream_job.py, spark/binlog_source.py).

The Connect URL may hold a token: a detached program reads it from its private credentials file
(``session_from_private_file``), never from its arguments.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials, put_in_private_file

#: what pyspark sets in a process that opened a Spark Connect session; a spark-submit program inheriting
#: them would take itself for a Connect client
CONNECT_MODE_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
#: the key of the private credentials file that holds a detached program's Connect URL and session conf
PRIVATE_FILE_KEY = "spark_connect"


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def application_of(spark: Any, connect_url: str = "") -> tuple[str, str]:
    """The Spark application id and Spark UI address behind ``spark``. A Connect session runs in
    the server's application, whose UI is on the server's host (at the port its conf names)."""
    if not is_connect(spark):
        context = spark.sparkContext
        return context.applicationId, context.uiWebUrl or ""
    app_id = spark.conf.get("spark.app.id", None) or ""
    port = spark.conf.get("spark.ui.port", None) if spark.conf.get("spark.ui.enabled", "true") == "true" else None
    host = urlparse(connect_url.replace("sc://", "http://", 1)).hostname if connect_url else None
    return app_id, f"http://{host}:{port}" if host and port else ""


def server_address(url: str) -> str:
    """The host and port of a Connect URL, without its parameters (a token among them)."""
    return urlparse(url.replace("sc://", "http://", 1)).netloc


@contextmanager
def connect_session(url: str, conf: Mapping[str, str] | None = None) -> Iterator[Any]:
    """A Spark Connect session on ``url`` with the package as an artifact; stopped at the end, and
    this process no longer marked as a Connect client (pyspark marks it: a spark-submit started from
    it later would take itself for one)."""
    from pyspark.sql import SparkSession

    from airflow_provider_mysqlcdc.spark.packaging import build_py_files_zip

    builder = SparkSession.builder.remote(url)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    folder = Path(tempfile.mkdtemp(prefix="mysqlcdc-connect-"))
    saved = {name: os.environ.get(name) for name in CONNECT_MODE_VARIABLES}
    spark = None
    try:
        spark = builder.create()
        spark.addArtifacts(str(build_py_files_zip(folder / "airflow_provider_mysqlcdc.zip")), pyfile=True)
        yield spark
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(folder, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def add_session_to_private_file(path: Path, url: str, conf: Mapping[str, str]) -> None:
    """Put the Connect URL and the session's conf into the private credentials file at ``path``."""
    put_in_private_file(path, PRIVATE_FILE_KEY, {"url": url, "conf": dict(conf)})


def session_from_private_file(path: Path | str) -> tuple[str, dict[str, str]] | None:
    """The Connect URL and session conf ``add_session_to_private_file`` wrote, if any."""
    session = json.loads(Path(path).read_text()).get(PRIVATE_FILE_KEY)
    return (session["url"], dict(session.get("conf") or {})) if session else None


@dataclass(frozen=True)
class CarriedCredentials:
    """The source's settings and the object store's credentials, carried by the objects that run in a
    Connect server's Python workers (they cannot read the task's private file). ``repr`` shows neither."""

    source: SourceConfig = field(repr=False)
    object_store: ObjectStoreCredentials | None = field(default=None, repr=False)

    def install(self) -> None:
        """Make the object store's credentials this worker's (the state location, spill files, the lake)."""
        if self.object_store:
            self.object_store.install()
