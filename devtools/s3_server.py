"""A throwaway S3-compatible server on loopback (moto's server mode, from PyPI) for tests and demos.

It speaks the S3 API with conditional writes (``If-None-Match``), which delta-rs and the state
location's put-if-absent rely on. It accepts any access key; it is stopped by PID.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.throwaway_server import find_free_port, stop_process_group


@dataclass
class S3Server:
    log_file: Path
    port: int = field(default_factory=find_free_port)
    region: str = "us-east-1"
    _process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60) -> "S3Server":
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=2):
                    return self
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the S3 server did not start:\n{self.log_file.read_text()[-2000:]}") from None
                time.sleep(0.2)

    def connection(self, access_key: str, secret_key: str) -> dict[str, Any]:
        """An Airflow ``aws`` connection (as ``AIRFLOW_CONN_*`` JSON takes it) for this server."""
        return {"conn_type": "aws", "login": access_key, "password": secret_key,
                "extra": {"endpoint_url": self.endpoint_url, "region_name": self.region}}

    def storage_options(self, access_key: str, secret_key: str) -> dict[str, Any]:
        """fsspec (s3fs) options for reading what a test wrote, without touching this process's environment."""
        from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials

        credentials = ObjectStoreCredentials.from_aws_connection(conn_id="s3-server", login=access_key,
                                                                 password=secret_key,
                                                                 extra=self.connection(access_key, secret_key)["extra"])
        return credentials.fsspec_options("s3://")

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.endpoint_url}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        stop_process_group(self._process, timeout_s=10)

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
