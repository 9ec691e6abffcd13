"""Running the programs of ``spark/jobs/``: what the operators' runners (``SparkSubmitHook`` in
hooks/spark.py, Spark Connect in hooks/spark_connect.py) share.

The source password never goes into argv, Spark conf or the environment of Spark's processes: it
sits in a private file whose path the program gets as ``--source-file``. The job, the program's
log lines and its result travel through a report folder (spark/report.py), never its stdout.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.source.connection import ENV_PREFIX, SourceConfig
from airflow_provider_mysqlcdc.spark.connect import CONNECT_MODE_VARIABLES
from airflow_provider_mysqlcdc.spark.report import ReportWatcher
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials

log = logging.getLogger(__name__)

#: environment Spark's processes do not inherit: our credentials, and Airflow's connections and
#: variables (an Airflow worker configured through the environment holds passwords there)
PRIVATE_ENV_PREFIXES = (ENV_PREFIX, "AIRFLOW_CONN_", "AIRFLOW_VAR_")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def program_environment(private: Collection[str] = ()) -> dict[str, str]:
    """This process's environment without private variables (and those named in ``private``), for a
    program it starts: it gets its credentials in its private file."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(PRIVATE_ENV_PREFIXES) and k not in private and k not in CONNECT_MODE_VARIABLES}


def spark_environment(py_files_zip: Path, python: str, local: bool, private: Collection[str] = ()) -> dict[str, str]:
    """The environment spark-submit runs in: this one without private variables (and those named in
    ``private``: credentials this process installed, which reach the program in its private file),
    the installed pyspark's ``spark-submit`` first on the PATH, and the package zip on the Python path."""
    env = program_environment(private)
    # Python workers the driver's JVM starts itself (the streaming data source's planner) do not
    # get --py-files on their path; they inherit the JVM's PYTHONPATH, so the zip goes there too.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(py_files_zip), env.get("PYTHONPATH", "")) if p)
    env["PATH"] = os.pathsep.join(p for p in (str(spark_home() / "bin"), env.get("PATH", "")) if p)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = python
    if local:  # a local master needs no network beyond loopback
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def prepare_program(work: Path, source: SourceConfig, object_store: ObjectStoreCredentials | None,
                    report: ReportWatcher, job_json: str) -> Path:
    """What a program an operator starts gets: the private credentials file in ``work`` (the source's
    and the object store's; returns its path), and the job in a report folder cleared of what an
    earlier attempt of the task's try left."""
    secrets = source.to_private_file(work / "source.json")
    if object_store:
        object_store.add_to_private_file(secrets)
    report.remove()
    report.write_job(job_json)
    return secrets


def job_arguments(report: ReportWatcher, source_file: Path, args: list[str] | None = None) -> list[str]:
    return ["--report-to", report.folder, "--source-file", str(source_file), *(args or [])]


def job_outcome(report: ReportWatcher, what: str, exit_problem: str | None) -> dict[str, Any]:
    """The program's result from its report folder, or ``SparkJobFailed`` with its own error (else
    ``exit_problem``: how spark-submit ended, with its output's tail)."""
    failure = report.failure()
    if failure is not None:
        raise SparkJobFailed(f"{what} failed: {failure}")
    result = report.result()
    if result is None:
        raise SparkJobFailed(f"{what} ended without a result in {report.folder}"
                             + (f": {exit_problem}" if exit_problem else " (its driver was stopped, or died)"))
    return result


def wait_for_driver(report: ReportWatcher, what: str, *, ended: Callable[[], bool], problem: Callable[[], str | None],
                    on_line: Callable[[str], None], on_driver: Callable[[Any], None], timeout_s: float,
                    on_timeout: Callable[[], None]) -> None:
    """Follow a detached program's report folder until its driver is up. Raises ``SparkJobFailed``
    with its own error when it fails first (or ``ended()`` before, with ``problem()``), and after
    ``timeout_s`` (calling ``on_timeout`` first: stop it)."""
    deadline = time.monotonic() + timeout_s
    while report.driver is None:
        report.poll(on_line, on_driver)
        if report.failure() is not None or problem() or ended():
            job_outcome(report, what, problem())  # raises, unless it already finished
        if time.monotonic() > deadline:
            on_timeout()
            raise SparkJobFailed(f"{what}: no driver came up within {timeout_s:.0f}s")
        time.sleep(1)
