"""A throwaway Spark Connect server from the pip-installed pyspark (the class
``start-connect-server.sh`` starts), on loopback in local mode; stopped by its process group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.spark.connect import SERVER_FILE_EXTRA, write_server_credentials_file
from devtools.throwaway_server import find_free_port, stop_process_group

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass
class SparkConnectServer:
    work_dir: Path
    master: str = "local[2]"
    python: str = sys.executable
    port: int = field(default_factory=find_free_port)
    ui_port: int = field(default_factory=find_free_port)
    _process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.work_dir / "connect-server.log"

    @property
    def credentials_file(self) -> Path:
        """The private credentials file its Python workers read (in a ``secrets`` folder, which the
        tests' searches for secrets skip)."""
        return self.work_dir / "secrets" / "server.json"

    def connection(self, password: str, *, port: int | None = None) -> dict[str, Any]:
        """An Airflow ``spark_connect`` connection (as ``AIRFLOW_CONN_*`` JSON takes it) for this server,
        whose credentials file now holds ``password``; ``port``: another way in (a proxy)."""
        write_server_credentials_file(self.credentials_file, password)
        return {"conn_type": "spark_connect", "host": "127.0.0.1", "port": port or self.port,
                "extra": {SERVER_FILE_EXTRA: str(self.credentials_file)}}

    def start(self, timeout_s: float = 120) -> "SparkConnectServer":
        from airflow_provider_mysqlcdc.launch.submit import spark_home

        home = spark_home()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=self.python)
        command = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", self.master,
                   "--name", "Spark Connect server", "--conf", f"spark.connect.grpc.binding.port={self.port}",
                   "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                   "--conf", "spark.sql.shuffle.partitions=4", "--conf", f"spark.ui.port={self.ui_port}"]
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             cwd=self.work_dir, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while "Spark Connect server started" not in self.log_file.read_text(errors="replace"):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Spark Connect server did not start:\n{self.log_file.read_text()[-3000:]}")
            time.sleep(0.5)
        return self

    def running_jobs(self) -> int:
        """How many Spark jobs the server runs now (its Spark UI's REST API), queued ones included."""
        base = f"http://127.0.0.1:{self.ui_port}/api/v1/applications"
        with urllib.request.urlopen(base, timeout=10) as response:
            [app] = json.loads(response.read())
        with urllib.request.urlopen(f"{base}/{app['id']}/jobs?status=running", timeout=10) as response:
            return len(json.loads(response.read()))

    def stop(self) -> None:
        stop_process_group(self._process)

    def __enter__(self) -> "SparkConnectServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
