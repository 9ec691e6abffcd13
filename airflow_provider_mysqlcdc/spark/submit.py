"""Running the programs of ``spark/jobs/`` (shared by the operators' ``SparkSubmitHook`` path in
hooks/spark.py, and by tests, the demo and the benchmarks through ``SparkSubmit``).

The source password never goes into argv, Spark conf or the environment of Spark's processes: it
sits in a private file whose path the program gets as ``--source-file``. The job, the program's
log lines and its result travel through a report folder (spark/report.py), never its stdout.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.source.connection import ENV_PREFIX, SourceConfig
from airflow_provider_mysqlcdc.spark.connect import CONNECT_MODE_VARIABLES
from airflow_provider_mysqlcdc.spark.packaging import build_py_files_zip, spark_job_script
from airflow_provider_mysqlcdc.spark.report import ReportWatcher
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials

log = logging.getLogger(__name__)

#: environment Spark's processes do not inherit: our credentials, and Airflow's connections and
#: variables (an Airflow worker configured through the environment holds passwords there)
PRIVATE_ENV_PREFIXES = (ENV_PREFIX, "AIRFLOW_CONN_", "AIRFLOW_VAR_")


class SparkJobFailed(RuntimeError):
    """A Spark program failed; the message carries its own error when it reported one."""


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


@dataclass
class SparkSubmit:
    """spark-submit as a plain child process (tests, the demo, benchmarks; no Airflow needed)."""

    master: str = "local[2]"
    python: str = sys.executable
    conf: dict[str, str] = field(default_factory=dict)
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mysqlcdc-spark-")))
    last_log: str = ""  # spark-submit's output and the program's log lines of the last run()

    def command(self, script: str, args: list[str], py_files: Path) -> list[str]:
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master, "--py-files", str(py_files)]
        for key, value in {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", **self.conf}.items():
            cmd += ["--conf", f"{key}={value}"]
        return cmd + [str(spark_job_script(script)), *args]

    def environment(self) -> dict[str, str]:
        return spark_environment(self.py_files_zip, self.python, local=True)

    @property
    def py_files_zip(self) -> Path:
        return self.work_dir / "airflow_provider_mysqlcdc.zip"

    def _prepared(self, script: str, args: list[str]) -> list[str]:
        py_files = build_py_files_zip(self.py_files_zip)
        cmd = self.command(script, args, py_files)
        log.info("spark-submit %s", " ".join(cmd[1:]))
        return cmd

    def new_report(self) -> ReportWatcher:
        return ReportWatcher(str(self.work_dir / f"report-{uuid.uuid4().hex[:12]}"))

    def start(self, script: str, args: list[str], source_file: Path, log_file: Path) -> subprocess.Popen[bytes]:
        """Start a job in its own process group (a long-running stream); its output and log lines go to
        ``log_file`` (the program logs there itself: no report folder)."""
        with open(log_file, "ab") as out:
            return subprocess.Popen(self._prepared(script, ["--source-file", str(source_file), *args]),
                                    env=self.environment(), stdout=out, stderr=subprocess.STDOUT, cwd=self.work_dir,
                                    start_new_session=True)

    def run(self, script: str, args: list[str], source_file: Path, timeout_s: float | None = 1800,
            on_progress: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Run a job to completion and return its reported result; raise with its error on failure.
        Its log lines are handed to ``on_progress`` as they come."""
        report = self.new_report()
        proc = subprocess.Popen(self._prepared(script, job_arguments(report, source_file, args)),
                                env=self.environment(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=self.work_dir)
        lines: list[str] = []

        def progress(line: str) -> None:
            lines.append(line + "\n")
            if on_progress:
                on_progress(line)

        stop = threading.Event()
        follower = threading.Thread(target=report.follow, args=(stop, progress), daemon=True)
        follower.start()
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill) if timeout_s else None
        if timer:
            timer.start()
        try:
            output = proc.communicate()[0]
        finally:
            if timer:
                timer.cancel()
            stop.set()
            follower.join()
        self.last_log = output + "".join(lines)
        problem = None
        if proc.returncode != 0:
            problem = (f"spark-submit exited with code {proc.returncode}"
                       f"{f' (timed out after {timeout_s}s)' if timed_out.is_set() else ''}: "
                       + "\n".join(output.splitlines()[-40:]))
        return job_outcome(report, f"spark-submit {script}", problem)
