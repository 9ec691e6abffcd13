"""Where the pipeline's Spark jobs run: a master URL, or an Airflow ``spark`` connection.

The connection is the apache-spark provider's own type (the one ``SparkSubmitOperator`` uses), read
by that provider's hook so that host, port, ``deploy-mode``, ``queue``, ``namespace`` and Kerberos
extras mean exactly what they mean there. Two differences, both deliberate:

- a connection id that does not exist fails (the provider's hook silently falls back to YARN);
- only client deploy mode: the operators hand the job spec and the source credentials to the driver
  as private local files and read its result from its stdout, so the driver runs where the task runs.

The jobs always run with the ``spark-submit`` of the installed pyspark: the binlog source is a
Python data source, which needs that exact Spark version on the driver. ``spark_conf`` is passed as
``--conf`` arguments, which any user of the machine can see, so keys that look like secrets are
refused (give those through the environment or a credentials provider instead).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError

_SECRET_LOOKING = re.compile(r"password|secret|token|credential|access\.?key|private\.?key", re.IGNORECASE)


@dataclass(frozen=True)
class SparkTarget:
    """A master URL and the Spark conf every job of a pipeline is submitted with."""

    master: str = "local[2]"
    conf: dict[str, str] = field(default_factory=dict)


def spark_target(*, spark_conn_id: str | None, spark_master: str,
                 spark_conf: Mapping[str, Any] | None) -> SparkTarget:
    """Resolve the operators' ``spark_conn_id`` / ``spark_master`` / ``spark_conf`` arguments."""
    conf = checked_spark_conf(spark_conf)
    if not spark_conn_id:
        return SparkTarget(spark_master, conf)
    from airflow.sdk import BaseHook

    try:
        BaseHook.get_connection(spark_conn_id)
    except Exception as exc:  # the SDK raises its own "not found" type
        raise ConfigurationError(f"Spark connection {spark_conn_id!r} does not exist ({exc}): create it (type "
                                 "'spark', host = master URL such as spark://host:7077, yarn or k8s://...) or "
                                 "leave spark_conn_id unset to use spark_master.") from exc
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    resolved = SparkSubmitHook(conn_id=spark_conn_id)._connection
    if resolved.get("deploy_mode") not in (None, "", "client"):
        raise ConfigurationError(f"Spark connection {spark_conn_id!r} asks for deploy mode "
                                 f"{resolved['deploy_mode']!r}: the pipeline's jobs run in client deploy mode (their "
                                 "driver reads the job and credentials from the task's machine and reports back on "
                                 "stdout). Remove the 'deploy-mode' extra or set it to 'client'.")
    from_connection = {
        "spark.yarn.queue": resolved.get("queue"),
        "spark.kubernetes.namespace": resolved.get("namespace"),
        "spark.kerberos.principal": resolved.get("principal"),
        "spark.kerberos.keytab": resolved.get("keytab"),
    }
    return SparkTarget(resolved["master"], {**{k: str(v) for k, v in from_connection.items() if v}, **conf})


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
