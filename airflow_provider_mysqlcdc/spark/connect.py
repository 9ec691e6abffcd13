"""Spark Connect sessions: opening one for a program of ``spark/jobs/``, and what differs in one.

A program's driver side then runs in a plain Python process (the task's own, or the detached
stream's) with no JVM; the Spark side runs on a long-running Spark Connect server. The package
travels to the server as a session artifact, so the server's Python workers import it like
executors do with ``--py-files``.

What cannot travel as a file: the task's private credentials file. The server's Python workers (the
chunk readers, the binlog source's planner and readers, the stream's ``foreachBatch`` function) do not
see it, and no secret may travel to the server inside the functions it runs. So the server holds a
private credentials file of its own, which the ``spark_connect`` connection names in its extras as
``server_credentials_file``: the source's password, and the object store's credentials unless the
server has its own (``write_server_credentials_file`` writes one). Only its path travels.

The Connect URL may hold a token: a detached program reads it from its private credentials file
(``ConnectSession.from_private_file``), never from its arguments.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow_provider_mysqlcdc.cdc.source.connection import read_private_file, write_private_file
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials, put_in_private_file

#: what pyspark sets in a process that opened a Spark Connect session; a spark-submit program inheriting
#: them would take itself for a Connect client
CONNECT_MODE_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
#: the key of the private credentials file that holds a detached program's Connect session
PRIVATE_FILE_KEY = "spark_connect"
#: the extra of a ``spark_connect`` connection naming the private credentials file on the server
SERVER_FILE_EXTRA = "server_credentials_file"


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
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


@dataclass(frozen=True)
class ConnectSession:
    """Where a program's Spark Connect session is: the server's URL (it may hold a token), the session's
    conf, and the private credentials file the server's Python workers read (``SERVER_FILE_EXTRA``)."""

    url: str = field(repr=False)
    conf: dict[str, str] = field(default_factory=dict)
    server_credentials_file: str = ""

    def add_to_private_file(self, path: Path) -> None:
        """Put this session into the private credentials file at ``path`` (a detached program's)."""
        put_in_private_file(path, PRIVATE_FILE_KEY, asdict(self))

    @classmethod
    def from_private_file(cls, path: Path | str) -> "ConnectSession | None":
        """The session ``add_to_private_file`` wrote, if any."""
        session = read_private_file(path).get(PRIVATE_FILE_KEY)
        return cls(**session) if session else None


def write_server_credentials_file(path: Path | str, password: str,
                                  object_store: ObjectStoreCredentials | None = None) -> Path:
    """Write the private credentials file a Spark Connect server's Python workers read: the source's
    password, and the object store's credentials (none: the server's own, e.g. an instance profile).
    Only its owner can read it; run this as the user the server runs as, on the server's machine."""
    path = write_private_file(path, {"password": password})
    if object_store:
        object_store.add_to_private_file(path)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m airflow_provider_mysqlcdc.spark.connect --write-server-file PATH``: on the Spark
    Connect server's machine, as the user the server runs as, write its private credentials file.
    The password is asked for (or read from ``MYSQLCDC_SOURCE_PASSWORD``), never taken as an argument;
    ``--with-aws-environment`` adds this shell's ``AWS_*`` variables for the object store."""
    import argparse
    import getpass

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--write-server-file", required=True, metavar="PATH")
    parser.add_argument("--with-aws-environment", action="store_true")
    args = parser.parse_args(argv)
    password = os.environ.get("MYSQLCDC_SOURCE_PASSWORD") or getpass.getpass("source password: ")
    object_store = ObjectStoreCredentials({name: value for name, value in os.environ.items()
                                           if name.startswith("AWS_")}) if args.with_aws_environment else None
    path = write_server_credentials_file(args.write_server_file, password, object_store)
    print(f"wrote {path} (mode 0600); name it in the spark_connect connection's extras as "
          f'{{"{SERVER_FILE_EXTRA}": "{path.resolve()}"}}')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
