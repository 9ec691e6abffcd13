"""spark-submit as a plain child process, without Airflow: the tests, the demo, the torture run and the
benchmarks start the programs of ``spark/jobs/`` with it, on a local master.

It prepares each run the way the operators' runner does (spark/submit.py: the package zip on the
Python path, the environment without private variables, the program's report folder) through the
same functions of ``airflow_provider_mysqlcdc.spark.submit``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.spark.packaging import build_py_files_zip, spark_job_script
from airflow_provider_mysqlcdc.spark.report import ReportWatcher
from airflow_provider_mysqlcdc.spark.submit import job_arguments, job_outcome, spark_environment, spark_home

log = logging.getLogger(__name__)


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
