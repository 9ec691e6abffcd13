"""The programs of ``spark/jobs/`` run the way the operators run them, without an Airflow task: the
tests, the demo, the torture run and the benchmarks use this.

``SparkSubmit`` is the operators' own runner (launch/submit.py ``SparkJobRunner``: the apache-spark
provider's ``SparkSubmitHook``, the package zip, the private credentials file, the report folder)
on a local master that hooks/spark.py turns into a ``spark`` connection, as it does for an operator
given ``spark_master``. What it adds is what a test needs around it: the job read from a job file,
the source and object-store credentials read back from a private file, the program's lines kept
(``last_log``), a time limit. ``start`` (a stream to kill -9 while it runs) is the one exception, a
plain child process with the runner's command line and environment: its docstring says why.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.hooks.spark import spark_target
from airflow_provider_mysqlcdc.launch.submit import (
    SparkJobRunner,
    SparkTarget,
    program_conf,
    spark_environment,
    spark_home,
)
from airflow_provider_mysqlcdc.protocol.envelope import RECORD
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.spark.packaging import build_py_files_zip, spark_job_script
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials

log = logging.getLogger(__name__)


class _Lines:
    """What a runner's ``log`` is given (its program's lines, the driver's address), handed on to ``sink``."""

    def __init__(self, sink: Callable[[str], None]):
        self.sink = sink

    def _line(self, msg: str, *args: Any) -> None:
        self.sink((msg % args if args else msg) + "\n")

    info = warning = error = debug = _line


class _HookOutput:
    """spark-submit's output, which the provider's hook logs line by line through structlog (Airflow's
    logging), handed to ``sink`` as well for the duration of a ``with``: a processor put first in
    structlog's chain (its public ``configure``) passes every event on unchanged, and copies it to
    the sinks of the ``with`` blocks open at the time."""

    _lock = threading.Lock()
    _sinks: list[Callable[[str], None]] = []

    def __init__(self, sink: Callable[[str], None]):
        self.sink = sink

    @classmethod
    def _tee(cls, logger: Any, method_name: str, event_dict: Any) -> Any:
        for sink in list(cls._sinks):
            sink(f"{event_dict.get('event', '')}\n")
        return event_dict

    def __enter__(self) -> "_HookOutput":
        with self._lock:
            processors = structlog.get_config()["processors"]
            if self._tee not in processors:  # put back after Airflow configures its logging again
                structlog.configure(processors=[self._tee, *processors])
            self._sinks.append(self.sink)
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            if self.sink in self._sinks:
                self._sinks.remove(self.sink)


#: runs every stream job these tools start on this engine (``StreamJob.stream_engine``), whatever its
#: job file says: ``MYSQLCDC_TEST_STREAM_ENGINE=driver bin/test tests/integration`` runs the suite's
#: streams on the driver loop
STREAM_ENGINE_VARIABLE = "MYSQLCDC_TEST_STREAM_ENGINE"


def _job_json(args: list[str]) -> str:
    """The job of ``--job FILE`` among a program's arguments (the only one the programs take besides
    the report folder and the credentials file, which the runner gives), on the stream engine
    ``STREAM_ENGINE_VARIABLE`` names (the file is rewritten with it)."""
    if len(args) != 2 or args[0] != "--job":
        raise ValueError(f"SparkSubmit runs a program with ['--job', FILE] only, got {args!r}")
    text = Path(args[1]).read_text()
    engine = os.environ.get(STREAM_ENGINE_VARIABLE)
    if engine and json.loads(text).get(RECORD) == StreamJob.FORMAT.kind:
        job = StreamJob.from_json(text)
        job.stream_engine = engine
        text = job.to_json()
        Path(args[1]).write_text(text)
    return text


@dataclass
class SparkSubmit:
    """The operators' runner on a local master, for tests, the demo and benchmarks (see the module doc)."""

    master: str = "local[2]"
    python: str = sys.executable
    conf: dict[str, str] = field(default_factory=dict)
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mysqlcdc-spark-")))
    last_log: str = ""  # spark-submit's output and the program's log lines of the last run()

    def target(self) -> SparkTarget:
        """The local master as a ``spark`` connection, the way hooks/spark.py resolves an operator's ``spark_master``."""
        return spark_target(spark_conn_id=None, spark_master=self.master,
                            spark_conf={"spark.ui.enabled": "false", **self.conf})

    def runner(self, script: str, sink: Callable[[str], None]) -> SparkJobRunner:
        return SparkJobRunner(self.target(), name=f"mysqlcdc-{Path(script).stem}", log=_Lines(sink),
                              python=self.python)

    def _report_folder(self) -> str:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        return str(self.work_dir / f"report-{uuid.uuid4().hex[:12]}")

    def run(self, script: str, args: list[str], source_file: Path, timeout_s: float | None = 1800,
            on_progress: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Run a program to completion and return its reported result; raise ``SparkJobFailed`` with its
        own error on failure. Its log lines are handed to ``on_progress`` as they come."""
        lines: list[str] = []

        def keep(line: str) -> None:
            lines.append(line)
            if on_progress:
                on_progress(line.rstrip("\n"))

        runner = self.runner(script, keep)
        timer = threading.Timer(timeout_s, runner.on_kill) if timeout_s else None
        if timer:
            timer.daemon = True
            timer.start()
        try:
            with _HookOutput(lines.append):
                return runner.run(script, _job_json(args), source=SourceConfig.from_private_file(source_file),
                                  report_folder=self._report_folder(),
                                  object_store=ObjectStoreCredentials.from_private_file(source_file) or None)
        except SparkJobFailed as exc:
            if timer and not timer.is_alive():
                raise SparkJobFailed(f"{exc} (killed after {timeout_s}s)") from exc
            raise
        finally:
            if timer:
                timer.cancel()
            self.last_log = "".join(lines)

    def start(self, script: str, args: list[str], source_file: Path, log_file: Path) -> subprocess.Popen[bytes]:
        """Start a program as a child process in a session of its own (a long-running stream to kill -9),
        its output and log lines going to ``log_file`` as they are written.

        Not through the runner: a detached program the runner starts reports its lines through its
        report folder, about once a second, and the tests that kill a stream the moment it logs a line
        (in the middle of a micro-batch) need each line when it is written. The program gets the same
        command line, environment and conf as under the runner (launch/submit.py's helpers), with no
        report folder, so it logs to its stderr."""
        target = self.target()
        py_files = build_py_files_zip(self.work_dir / "airflow_provider_mysqlcdc.zip")
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", target.master, "--py-files", str(py_files)]
        for key, value in program_conf(target, self.python).items():
            cmd += ["--conf", f"{key}={value}"]
        _job_json(args)  # on the stream engine STREAM_ENGINE_VARIABLE names
        cmd += [str(spark_job_script(script)), "--source-file", str(source_file), *args]
        log.info("spark-submit %s", " ".join(cmd[1:]))
        with open(log_file, "ab") as out:
            return subprocess.Popen(cmd, env=spark_environment(py_files, self.python, local=target.local),
                                    stdout=out, stderr=subprocess.STDOUT, cwd=self.work_dir, start_new_session=True)
