"""Connection settings for the source server, and opening connections.

Passwords never travel in process arguments: they come from the caller, an environment variable
or a private file (see ``SourceConfig.from_env``), and ``repr`` hides them.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import pymysql

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.retry import RetryPolicy
from airflow_provider_mysqlcdc.cdc.source.tls import UNREACHABLE, connect_preferring_tls, replication_tls

T = TypeVar("T")

#: Environment variables read by ``SourceConfig.from_env``.
ENV_PREFIX = "MYSQLCDC_SOURCE_"


#: Default server-id range for binlog connections; each connection takes a random id from it,
#: because the server drops an older replica connection that registers with the same id.
DEFAULT_SERVER_ID_RANGE = (5400, 6399)


def pick_server_id(server_id_range: tuple[int, int] = DEFAULT_SERVER_ID_RANGE) -> int:
    """A replica server id for one binlog connection, at random within the range."""
    low, high = server_id_range
    return random.randint(low, high)


def parse_server_id_range(text: str | None) -> tuple[int, int]:
    """``'low-high'`` (or one id) as a range of replica server ids; empty: the default range."""
    text = (text or "").strip() or "-".join(map(str, DEFAULT_SERVER_ID_RANGE))
    low, sep, high = text.partition("-")
    try:
        bounds = (int(low), int(high if sep else low))
    except ValueError:
        bounds = (0, -1)
    if not 1 <= bounds[0] <= bounds[1] <= 2**32 - 1:
        raise ConfigurationError(f"Malformed server-id range {text!r}: write it as 'low-high', e.g. '5400-6399'.")
    return bounds


def write_private_file(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as JSON to a file only its owner can read (created so: never readable by others)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    return path


def read_private_file(path: str | Path) -> dict[str, Any]:
    """The JSON of a private credentials file: the one a task writes for its Spark program, or the one
    a Spark Connect connection names on its server (``server_credentials_file``)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"Cannot read the private credentials file {path} ({exc}). A Spark program reads the one its task "
            "wrote for it; on Spark Connect it is the file the spark_connect connection names as "
            "server_credentials_file, which must exist on the Spark Connect server, readable by the user the "
            "server runs as, and hold a JSON object (see docs/deploying.md, 'Spark Connect').") from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"The private credentials file {path} must hold a JSON object, e.g. "
                                 '{"password": "..."}.')
    return data


@dataclass(frozen=True)
class SourceConfig:
    host: str
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    database: str | None = None
    connect_timeout_s: int = 10
    ssl: dict[str, Any] | None = None
    #: how long a transient fault may last before an operation fails (0: fail at once); retry.py
    retry_budget_s: float = 0.0
    #: where the password is read from when ``password`` is empty: the private credentials file, so that
    #: settings shipped to Spark executors inside a function carry its path, never the password itself
    password_file: str | None = None
    #: the key of the column rules' ``hash`` mask (records/masking.py): a secret like the password, read
    #: from ``password_file`` when empty here
    mask_salt: str = field(default="", repr=False)

    def for_executors(self, private_file: str) -> "SourceConfig":
        """These settings without the password and the salt, which executors read from ``private_file``."""
        return replace(self, password="", mask_salt="", password_file=str(private_file))

    @property
    def secret(self) -> str:
        """The password: given, or read from ``password_file``."""
        if self.password or not self.password_file:
            return self.password
        return str(read_private_file(self.password_file).get("password") or "")

    def salt(self) -> str:
        """The masking salt: given, or read from ``password_file`` ("" when there is none)."""
        if self.mask_salt or not self.password_file:
            return self.mask_salt
        return str(read_private_file(self.password_file).get("mask_salt") or "")

    def to_json(self) -> str:
        """These settings for a Spark program's options: refused with the password in them (send
        ``for_executors(...)``, whose password stays in its private file)."""
        if self.password or self.mask_salt:
            raise ValueError("these source settings hold the password or the masking salt: send "
                             "for_executors(private_file) instead")
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "SourceConfig":
        return cls._from_dict(json.loads(text))

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(budget_s=self.retry_budget_s)

    def with_retry(self, budget_s: float) -> "SourceConfig":
        return replace(self, retry_budget_s=budget_s)

    def connect(self, *, autocommit: bool = True, **kwargs: Any) -> pymysql.connections.Connection:
        """Open a pymysql connection in UTC with utf8mb4, so values decode the same as the binlog's;
        a transient fault is ridden out within the retry budget."""
        if self.retry_budget_s > 0:
            return self.retry_policy.run(lambda: self._connect_once(autocommit, kwargs),
                                         f"connecting to {self.host}:{self.port}")
        return self._connect_once(autocommit, kwargs)

    def run(self, operation: Callable[[pymysql.connections.Connection], T], what: str) -> T:
        """``operation`` on a fresh connection, closed afterwards; started over on a transient fault
        within the retry budget (so ``operation`` must be idempotent, e.g. read-only)."""
        def attempt() -> T:
            conn = self._connect_once(True, {})
            try:
                return operation(conn)
            finally:
                conn.close()

        return self.retry_policy.run(attempt, what)

    def _connect_once(self, autocommit: bool, kwargs: dict[str, Any]) -> pymysql.connections.Connection:
        def connect(tls: dict[str, Any]) -> pymysql.connections.Connection:
            return pymysql.connect(host=self.host, port=self.port, user=self.user, password=self.secret,
                                   database=self.database, charset="utf8mb4", autocommit=autocommit,
                                   connect_timeout=self.connect_timeout_s, init_command="SET time_zone = '+00:00'",
                                   **{**tls, **kwargs})

        try:
            if self.ssl or "ssl" in kwargs or "ssl_disabled" in kwargs:
                return connect({"ssl": self.ssl})  # TLS as configured (or as the caller asks)
            # else encrypted where the server offers it, with one TLS context per process (tls.py)
            return connect_preferring_tls(self.host, self.port, connect)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else None
            if code == 1045:
                where = f" (the password comes from {self.password_file})" if self.password_file else ""
                raise ConfigurationError(
                    f"Access denied for user {self.user!r} at {self.host}:{self.port}{where}: "
                    "check the user name and password of the source connection."
                ) from exc
            if code in UNREACHABLE:
                raise ConfigurationError(
                    f"Cannot reach the source server at {self.host}:{self.port} ({exc.args[-1]}): "
                    "check host, port, firewall and that the server is running."
                ) from exc
            raise

    def replication_settings(self) -> dict[str, Any]:
        """Keyword arguments for python-mysql-replication's BinLogStreamReader."""
        settings: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.secret,
            "charset": "utf8mb4",
            "connect_timeout": self.connect_timeout_s,
        }
        settings.update({"ssl": self.ssl} if self.ssl else replication_tls(self.host, self.port))
        return settings

    def with_database(self, database: str | None) -> "SourceConfig":
        return replace(self, database=database)

    # --- serialisation without leaking the password into argv -------------------------------------
    def to_private_file(self, path: Path) -> Path:
        """Write the settings, password included, to a file only the owner can read."""
        return write_private_file(path, asdict(self))

    @classmethod
    def from_private_file(cls, path: Path) -> "SourceConfig":
        """The settings ``to_private_file`` wrote (the file may hold other credentials too: state/credentials.py)."""
        return cls._from_dict(read_private_file(path))

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> "SourceConfig":
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "SourceConfig":
        """Read ``MYSQLCDC_SOURCE_HOST/PORT/USER/PASSWORD/DATABASE`` or ``MYSQLCDC_SOURCE_FILE``."""
        env = os.environ if environ is None else environ
        if f"{ENV_PREFIX}FILE" in env:
            return cls.from_private_file(Path(env[f"{ENV_PREFIX}FILE"]))
        if f"{ENV_PREFIX}HOST" not in env:
            raise ConfigurationError(
                f"No source connection: set {ENV_PREFIX}HOST (and PORT, USER, PASSWORD) "
                f"or {ENV_PREFIX}FILE pointing at a private JSON file."
            )
        return cls(
            host=env[f"{ENV_PREFIX}HOST"],
            port=int(env.get(f"{ENV_PREFIX}PORT", "3306")),
            user=env.get(f"{ENV_PREFIX}USER", "root"),
            password=env.get(f"{ENV_PREFIX}PASSWORD", ""),
            database=env.get(f"{ENV_PREFIX}DATABASE") or None,
        )

    @classmethod
    def from_url(cls, url: str) -> "SourceConfig":
        """Parse ``mysql://user:password@host:port/db`` (used for MYSQLCDC_TEST_DSN)."""
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
            raise ConfigurationError(f"Not a mysql:// URL: {parts.scheme}://{parts.hostname or ''}...")
        return cls(
            host=parts.hostname,
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=(parts.path or "/")[1:] or None,
        )
