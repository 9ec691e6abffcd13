"""The hook for where the pipeline's Spark programs run (``MySqlCdcSparkHook``): the operators'
``spark_conn_id`` / ``spark_master`` / ``spark_conf`` arguments resolved into a ``SparkTarget``, and the
runner that starts the programs on it (launch/: spark-submit, a Spark Connect session, or a session on
the worker's shared local Spark Connect server).

Where they run is an Airflow ``spark`` connection, the apache-spark provider's own type: host and
port (the master URL), ``deploy-mode``, ``queue``, ``namespace``, ``spark-binary`` and Kerberos mean
exactly what they mean for ``SparkSubmitOperator``. Without a connection, ``spark_master`` (default
``local[2]``) becomes one, defined the way Airflow defines connections from the environment. A
connection id that does not exist fails (the provider's hook silently falls back to YARN). A
``spark_connect`` connection runs the programs as Spark Connect sessions (launch/connect_runner.py).

``spark_conf`` is passed as ``--conf`` arguments, which any user of the machine can see, so keys that
look like secrets are refused (give those through the environment or a credentials provider).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook, conf

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.launch.connect_runner import SparkConnectJobRunner
from airflow_provider_mysqlcdc.launch.local_runner import LOCAL_SPARK_MODES, LocalSparkJobRunner
from airflow_provider_mysqlcdc.launch.local_server import DEFAULT_IDLE_S, LocalSparkServer, ServerKind
from airflow_provider_mysqlcdc.launch.submit import SparkJobRunner, SparkTarget, program_conf
from airflow_provider_mysqlcdc.spark.connect import SERVER_FILE_EXTRA

#: conf keys that hold secrets, ours and the object stores' (S3 secret and session keys, SSE-C keys,
#: GCS service-account keys, Azure account keys and SAS tokens): refused in ``spark_conf``
_SECRET_LOOKING = re.compile(r"password|secret|token|credential|access[.\-_]?key|private[.\-_]?key|account[.\-_]?key|"
                             r"encryption[.\-_]?key|sse[.\-_]?c|(^|[.\-_])sas([.\-_]|$)|signature|keyfile|json[.\-_]?key",
                             re.IGNORECASE)

class MySqlCdcSparkHook(BaseHook):
    """Where the programs run and what starts them there, from a ``spark`` or ``spark_connect``
    connection (the apache-spark provider's types), or a bare master URL without one.

    :param spark_conn_id: a ``spark`` connection to submit through, or a ``spark_connect`` one whose
        server runs the programs as sessions; none: ``spark_master``
    :param spark_master: the master URL when no connection is given (default ``local[2]``)
    :param spark_conf: extra Spark configuration (no secrets: refused)
    """

    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    #: the connection types this hook runs programs through
    conn_types: Sequence[str] = ("spark", "spark_connect")
    hook_name = "Spark of a MySQL CDC pipeline"

    def __init__(self, spark_conn_id: str | None = None, *, spark_master: str = "local[2]",
                 spark_conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id
        self.spark_master = spark_master
        self.spark_conf = spark_conf

    @cached_property
    def target(self) -> SparkTarget:
        """The connection (or master) and conf the programs run on."""
        return spark_target(spark_conn_id=self.spark_conn_id, spark_master=self.spark_master,
                            spark_conf=self.spark_conf)

    def runner(self, *, name: str, log: Any, private: Sequence[str] = ()) -> SparkJobRunner | SparkConnectJobRunner:
        """What starts a program: a session on a ``spark_connect`` connection's server; spark-submit through
        a ``spark`` connection or a remote master; with a local master and no connection, a session on
        the worker's shared local Spark Connect server (``[mysqlcdc] local_spark = shared``, the default)
        or a spark-submit (``local_spark = submit``). ``private``: the environment variables the shared
        server, which outlives the task, must not keep (the task's object-store credentials)."""
        target = self.target
        if target.connect:
            return SparkConnectJobRunner(target.conn_id, conf=target.conf, log=log,
                                         server_credentials_file=target.server_credentials_file)
        submit = SparkJobRunner(target, name=name, log=log)
        if self.spark_conn_id or not target.local or local_spark_setting() == "submit":
            return submit
        kind = ServerKind(target.master, tuple(sorted(program_conf(target, sys.executable).items())))
        idle_s = conf.getfloat("mysqlcdc", "local_spark_idle_s", fallback=DEFAULT_IDLE_S)
        return LocalSparkJobRunner(LocalSparkServer(kind, idle_s=idle_s, private=tuple(private)), submit, log=log)


def local_spark_setting() -> str:
    """``[mysqlcdc] local_spark`` (``AIRFLOW__MYSQLCDC__LOCAL_SPARK``): how programs run on a local
    master without a ``spark_conn_id``: ``shared`` (the default: sessions on the worker's shared local
    Spark Connect server) or ``submit`` (a spark-submit, so a JVM, per task)."""
    mode = conf.get("mysqlcdc", "local_spark", fallback="shared").strip().lower()
    if mode not in LOCAL_SPARK_MODES:
        raise ConfigurationError(f"[mysqlcdc] local_spark is {mode!r}: give 'submit' (a spark-submit per task) or "
                                 "'shared' (sessions on one local Spark Connect server the worker's tasks share).")
    return mode


def spark_target(*, spark_conn_id: str | None, spark_master: str,
                 spark_conf: Mapping[str, Any] | None) -> SparkTarget:
    """Resolve the operators' ``spark_conn_id`` / ``spark_master`` / ``spark_conf`` arguments."""
    checked = checked_spark_conf(spark_conf)
    conn_id = spark_conn_id or _master_connection(spark_master)
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # the SDK raises its own "not found" type
        raise ConfigurationError(f"Spark connection {conn_id!r} does not exist ({exc}): create it (type "
                                 "'spark', host = master URL such as spark://host:7077, yarn or k8s://...; or type "
                                 "'spark_connect' for a Spark Connect server) or leave spark_conn_id unset to use "
                                 "spark_master.") from exc
    if conn.conn_type not in MySqlCdcSparkHook.conn_types:
        raise ConfigurationError(f"Connection {conn_id!r} is of type {conn.conn_type!r}: the pipeline's Spark programs "
                                 f"run through a connection of type {' or '.join(MySqlCdcSparkHook.conn_types)}.")
    if conn.conn_type == "spark_connect":
        server_file = str(conn.extra_dejson.get(SERVER_FILE_EXTRA) or "")
        if not server_file.startswith("/"):
            raise ConfigurationError(
                f"Spark Connect connection {conn_id!r} names no {SERVER_FILE_EXTRA} in its extras"
                f"{f' (got {server_file!r}, not an absolute path)' if server_file else ''}. The server's Python "
                "workers read the source's password, and the object store's credentials unless the server has its "
                "own, from a private file on the Spark Connect server, so that no secret travels inside the "
                "functions it runs: write it there as the user the server runs as (python -m "
                "airflow_provider_mysqlcdc.spark.connect --write-server-file PATH), then set "
                f'{{"{SERVER_FILE_EXTRA}": "PATH"}} in the connection\'s extras.')
        return SparkTarget(conn_id, f"sc://{conn.host or ''}{f':{conn.port}' if conn.port else ''}", conf=checked,
                           connect=True, server_credentials_file=server_file)
    deploy_mode = conn.extra_dejson.get("deploy-mode") or "client"
    if deploy_mode not in ("client", "cluster"):
        raise ConfigurationError(f"Spark connection {conn_id!r}: deploy-mode must be 'client' or 'cluster', got "
                                 f"{deploy_mode!r}.")
    # the master URL as the provider's hook builds it from the connection (it decides how to submit)
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    master = f"{master}:{conn.port}" if conn.port else master
    return SparkTarget(conn_id, master, deploy_mode, checked)


def _master_connection(master: str) -> str:
    """A ``spark`` connection for a bare master URL, defined in this process's environment."""
    conn_id = "mysqlcdc_spark_" + hashlib.sha1(master.encode()).hexdigest()[:10]
    os.environ.setdefault(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", "host": master}))
    return conn_id


def checked_spark_conf(spark_conf: Mapping[str, Any] | None) -> dict[str, str]:
    if spark_conf is None or spark_conf == "":
        return {}
    if isinstance(spark_conf, str):  # a rendered template
        try:
            spark_conf = json.loads(spark_conf)
        except ValueError as exc:
            raise ConfigurationError(f"spark_conf is not a JSON object: {spark_conf!r}") from exc
    if not isinstance(spark_conf, Mapping):
        raise ConfigurationError(f"spark_conf must be a mapping of Spark property to value, got {spark_conf!r}")
    conf = {}
    for key, value in spark_conf.items():
        if not isinstance(key, str) or not key.startswith("spark."):
            raise ConfigurationError(f"spark_conf key {key!r} is not a Spark property (they start with 'spark.')")
        if isinstance(value, (dict, list, tuple)) or value is None:
            raise ConfigurationError(f"spark_conf[{key!r}] must be a single value, got {value!r}")
        if _SECRET_LOOKING.search(key):
            raise ConfigurationError(f"spark_conf[{key!r}] looks like a secret, and Spark conf travels as "
                                     "spark-submit arguments anyone on the machine can read: give it through the "
                                     "environment or a credentials provider of the cluster instead.")
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return conf
