"""Where the Spark jobs run: a master URL or an Airflow ``spark`` connection (read through the
apache-spark provider's own hook, from a real Airflow connection in the environment)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.hooks.spark import SparkTarget, spark_target


def test_without_a_connection_the_master_and_conf_are_used_as_given():
    target = spark_target(spark_conn_id=None, spark_master="local[4]",
                          spark_conf={"spark.eventLog.enabled": True, "spark.executor.memory": "2g"})
    assert target == SparkTarget("local[4]", {"spark.eventLog.enabled": "true", "spark.executor.memory": "2g"})


def test_a_spark_connection_gives_master_queue_and_namespace(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SPARK", json.dumps(
        {"conn_type": "spark", "host": "spark://master.example", "port": 7077,
         "extra": {"queue": "etl", "namespace": "cdc", "deploy-mode": "client"}}))
    target = spark_target(spark_conn_id="cdc_spark", spark_master="local[2]",
                          spark_conf={"spark.yarn.queue": "override"})
    assert target.master == "spark://master.example:7077"
    assert target.conf == {"spark.yarn.queue": "override", "spark.kubernetes.namespace": "cdc"}


def test_a_missing_connection_fails_instead_of_falling_back_to_yarn():
    with pytest.raises(ConfigurationError, match="Spark connection 'no_such_spark' does not exist.*spark_master"):
        spark_target(spark_conn_id="no_such_spark", spark_master="local[2]", spark_conf=None)


def test_cluster_deploy_mode_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SPARK", json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}))
    with pytest.raises(ConfigurationError, match="deploy mode 'cluster'.*set it to 'client'"):
        spark_target(spark_conn_id="cdc_spark", spark_master="local[2]", spark_conf=None)


@pytest.mark.parametrize("conf, problem", [
    ({"spark.hadoop.fs.s3a.secret.key": "x"}, "looks like a secret"),
    ({"spark.ssl.keyStorePassword": "x"}, "looks like a secret"),
    ({"executor.memory": "2g"}, "is not a Spark property"),
    ({"spark.executor.memory": None}, "must be a single value"),
    (["spark.executor.memory"], "must be a mapping"),
])
def test_bad_spark_conf_is_refused(conf, problem):
    with pytest.raises(ConfigurationError, match=problem):
        spark_target(spark_conn_id=None, spark_master="local[2]", spark_conf=conf)
