"""Running the programs of ``spark/jobs/`` with spark-submit (tests, the demo, and the Airflow glue).

The source password never goes into argv, Spark conf or the environment of Spark's processes: it
sits in a private file whose path is passed through the environment (``MYSQLCDC_SOURCE_FILE``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.source.connection import ENV_PREFIX
from airflow_provider_mysqlcdc.spark.packaging import build_py_files_zip, spark_job_script
from airflow_provider_mysqlcdc.spark.results import ERROR_MARKER, RESULT_MARKER, parse_error, parse_result

log = logging.getLogger(__name__)

#: lines of our own loggers (module names) are progress worth showing in task logs
PROGRESS_MARK = "airflow_provider_mysqlcdc"
RESULT_MARKERS = (RESULT_MARKER, ERROR_MARKER)
#: environment Spark's processes do not inherit: our credentials, and Airflow's connections and
#: variables (an Airflow worker configured through the environment holds passwords there)
PRIVATE_ENV_PREFIXES = (ENV_PREFIX, "AIRFLOW_CONN_", "AIRFLOW_VAR_")


class SparkJobFailed(RuntimeError):
    """A spark-submit program exited non-zero; the message carries its own error when it published one."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class SparkSubmit:
    master: str = "local[2]"
    python: str = sys.executable
    conf: dict[str, str] = field(default_factory=dict)
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mysqlcdc-spark-")))
    last_log: str = ""  # stdout and stderr of the last run(), for diagnostics

    def command(self, script: str, args: list[str], py_files: Path) -> list[str]:
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master, "--py-files", str(py_files)]
        for key, value in {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", **self.conf}.items():
            cmd += ["--conf", f"{key}={value}"]
        return cmd + [str(spark_job_script(script)), *args]

    def environment(self, source_file: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE_ENV_PREFIXES)}
        # Python workers the driver's JVM starts itself (the streaming data source's planner) do not
        # get --py-files on their path; they inherit the JVM's PYTHONPATH, so the zip goes there too.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.py_files_zip), env.get("PYTHONPATH", "")) if p)
        env.update({
            "SPARK_LOCAL_IP": env.get("SPARK_LOCAL_IP", "127.0.0.1"),
            "PYSPARK_PYTHON": self.python,
            "PYSPARK_DRIVER_PYTHON": self.python,
            f"{ENV_PREFIX}FILE": str(source_file),
        })
        return env

    @property
    def py_files_zip(self) -> Path:
        return self.work_dir / "airflow_provider_mysqlcdc.zip"

    def _prepared(self, script: str, args: list[str]) -> list[str]:
        py_files = build_py_files_zip(self.py_files_zip)
        cmd = self.command(script, args, py_files)
        log.info("spark-submit %s", " ".join(cmd[1:]))
        return cmd

    def start(self, script: str, args: list[str], source_file: Path, log_file: Path) -> subprocess.Popen[bytes]:
        """Start a job in its own process group (a long-running stream); its output goes to ``log_file``."""
        with open(log_file, "ab") as out:
            return subprocess.Popen(self._prepared(script, args), env=self.environment(source_file), stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.work_dir, start_new_session=True)

    def run(self, script: str, args: list[str], source_file: Path, timeout_s: float | None = 1800,
            on_progress: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Run a job to completion and return its published result; raise with the log tail on failure.
        Our own log lines are handed to ``on_progress`` as they come (task logs show live progress)."""
        proc = subprocess.Popen(self._prepared(script, args), env=self.environment(source_file), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.work_dir)
        stderr: list[str] = []
        drain = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
        drain.start()
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill) if timeout_s else None
        if timer:
            timer.start()
        stdout: list[str] = []
        try:
            for line in proc.stdout:  # type: ignore[union-attr]  # the Python driver logs through the JVM stdout
                stdout.append(line)
                if on_progress and PROGRESS_MARK in line and not line.startswith(RESULT_MARKERS):
                    on_progress(line.rstrip())
            returncode = proc.wait()
        finally:
            if timer:
                timer.cancel()
            drain.join(timeout=10)
        out, err = "".join(stdout), "".join(stderr)
        self.last_log = out + err
        if returncode != 0:
            error = parse_error(out)
            detail = error or "\n".join(err.splitlines()[-40:])
            raise SparkJobFailed(f"spark-submit {script} failed with exit code {returncode}"
                                 f"{f' (timed out after {timeout_s}s)' if timed_out.is_set() else ''}: {detail}")
        return parse_result(out)
