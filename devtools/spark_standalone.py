"""A throwaway Spark standalone cluster (one master, one worker) from the pip-installed pyspark.

The pip package has no sbin/start-master.sh, so the daemons run through ``bin/spark-class`` as
plain child processes on loopback, and are stopped by PID.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools.throwaway_server import find_free_port, stop_process_group


@dataclass
class StandaloneCluster:
    work_dir: Path
    worker_cores: int = 2
    worker_memory: str = "2g"
    python: str | None = None
    port: int = field(default_factory=find_free_port)
    #: the master's REST submission server (what kills a cluster-mode driver: SparkSubmitHook.on_kill)
    rest_port: int = field(default_factory=find_free_port)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60) -> "StandaloneCluster":
        from airflow_provider_mysqlcdc.launch.submit import spark_home

        home = spark_home()
        env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1")
        if self.python:
            env["PYSPARK_PYTHON"] = self.python
        self.work_dir.mkdir(parents=True, exist_ok=True)
        spark_class = str(home / "bin" / "spark-class")
        master_log = self.work_dir / "master.log"
        master_env = dict(env, SPARK_MASTER_OPTS=f"-Dspark.master.rest.enabled=true "
                                                 f"-Dspark.master.rest.port={self.rest_port}")
        self._spawn([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(find_free_port())], master_env, master_log)
        self._wait_for(master_log, "I have been elected leader", timeout_s)
        worker_log = self.work_dir / "worker.log"
        self._spawn([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                     "--webui-port", str(find_free_port()), "--work-dir", str(self.work_dir / "work"),
                     self.master_url], env, worker_log)
        self._wait_for(worker_log, "Successfully registered with master", timeout_s)
        return self

    def stop(self) -> None:
        for proc in reversed(self._processes):
            stop_process_group(proc, timeout_s=20)
        self._processes.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _spawn(self, cmd: list[str], env: dict[str, str], log_file: Path) -> None:
        with open(log_file, "ab") as out:
            self._processes.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                    start_new_session=True))

    def _wait_for(self, log_file: Path, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if log_file.exists() and text in log_file.read_text(errors="replace"):
                return
            if any(p.poll() is not None for p in self._processes):
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Spark standalone daemon did not start ({text!r} not in {log_file}):\n"
                           + (log_file.read_text(errors="replace")[-3000:] if log_file.exists() else ""))
