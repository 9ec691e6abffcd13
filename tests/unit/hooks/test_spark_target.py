"""Where the Spark jobs run: a master URL or an Airflow ``spark`` connection (read through the
apache-spark provider's own hook, from a real Airflow connection in the environment)."""

from __future__ import annotations

import json
import logging

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.hooks.spark import MySqlCdcSparkHook, checked_spark_conf, spark_target
from airflow_provider_mysqlcdc.launch.connect_runner import SparkConnectJobRunner
from airflow_provider_mysqlcdc.launch.local_runner import LocalSparkJobRunner
from airflow_provider_mysqlcdc.launch.submit import SparkJobRunner, SparkTarget


def test_without_a_connection_the_master_becomes_a_spark_connection():
    from airflow.sdk import BaseHook

    target = spark_target(spark_conn_id=None, spark_master="local[4]",
                          spark_conf={"spark.eventLog.enabled": True, "spark.executor.memory": "2g"})
    assert (target.master, target.deploy_mode, target.local) == ("local[4]", "client", True)
    assert target.conf == {"spark.eventLog.enabled": "true", "spark.executor.memory": "2g"}
    connection = BaseHook.get_connection(target.conn_id)
    assert (connection.conn_type, connection.host) == ("spark", "local[4]")


def test_a_spark_connection_gives_master_and_deploy_mode(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SPARK", json.dumps(
        {"conn_type": "spark", "host": "spark://master.example", "port": 7077,
         "extra": {"queue": "etl", "deploy-mode": "cluster"}}))
    target = spark_target(spark_conn_id="cdc_spark", spark_master="local[2]", spark_conf=None)
    assert target == SparkTarget("cdc_spark", "spark://master.example:7077", "cluster", {})
    assert target.standalone_cluster and not target.local


def test_a_missing_connection_fails_instead_of_falling_back_to_yarn():
    with pytest.raises(ConfigurationError, match="Spark connection 'no_such_spark' does not exist.*spark_master"):
        spark_target(spark_conn_id="no_such_spark", spark_master="local[2]", spark_conf=None)


def test_an_unknown_deploy_mode_is_refused(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SPARK", json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "remote"}}))
    with pytest.raises(ConfigurationError, match="deploy-mode must be 'client' or 'cluster', got 'remote'"):
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


def test_a_spark_connect_connection_runs_programs_as_sessions(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CDC_CONNECT", json.dumps(
        {"conn_type": "spark_connect", "host": "connect.example", "port": 15002, "password": "token-1",
         "extra": {"server_credentials_file": "/etc/mysqlcdc/server.json"}}))
    target = spark_target(spark_conn_id="cdc_connect", spark_master="local[2]", spark_conf=None)
    assert target == SparkTarget("cdc_connect", "sc://connect.example:15002", conf={}, connect=True,
                                 server_credentials_file="/etc/mysqlcdc/server.json")
    assert "token-1" not in repr(target)


@pytest.mark.parametrize("extra", [{}, {"server_credentials_file": "server.json"}])
def test_a_spark_connect_connection_without_a_server_credentials_file_is_refused(monkeypatch, extra):
    monkeypatch.setenv("AIRFLOW_CONN_CDC_CONNECT", json.dumps(
        {"conn_type": "spark_connect", "host": "connect.example", "port": 15002, "extra": extra}))
    with pytest.raises(ConfigurationError, match="names no server_credentials_file.*--write-server-file"):
        spark_target(spark_conn_id="cdc_connect", spark_master="local[2]", spark_conf=None)


def test_a_spark_submit_program_never_inherits_a_spark_connect_mode(monkeypatch, tmp_path):
    """A process that opened a Spark Connect session is marked as a Connect client by pyspark; the
    classic programs it submits afterwards must not take themselves for one."""
    import sys

    from airflow_provider_mysqlcdc.launch.submit import spark_environment
    from airflow_provider_mysqlcdc.spark.connect import CONNECT_MODE_VARIABLES

    for name in CONNECT_MODE_VARIABLES:
        monkeypatch.setenv(name, "1")
    env = spark_environment(tmp_path / "package.zip", sys.executable, local=True)
    assert not set(CONNECT_MODE_VARIABLES) & set(env)


@pytest.mark.parametrize("key", [
    "spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.session.token", "spark.hadoop.fs.s3a.encryption.key",
    "spark.hadoop.fs.s3a.server-side-encryption.key", "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
    "spark.hadoop.fs.azure.sas.container.acct.blob.core.windows.net", "spark.hadoop.fs.azure.sas.fixed.token",
    "spark.hadoop.google.cloud.auth.service.account.json.keyfile", "spark.executorEnv.MYSQLCDC_SOURCE_PASSWORD",
])
def test_object_store_and_source_secrets_are_refused_in_spark_conf(key):
    with pytest.raises(ConfigurationError, match="looks like a secret"):
        checked_spark_conf({key: "x"})


def test_ordinary_spark_conf_is_not_taken_for_a_secret():
    assert checked_spark_conf({"spark.authenticate.enableSaslEncryption": "true", "spark.executor.memory": "2g"})


def test_spark_redacts_our_secrets_in_its_ui_and_event_logs():
    import re

    from airflow_provider_mysqlcdc.launch.submit import DEFAULT_CONF

    keys = re.compile(DEFAULT_CONF["spark.redaction.regex"])
    assert keys.search("spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net")
    assert keys.search("MYSQLCDC_SOURCE_FILE") and keys.search("spark.hadoop.fs.s3a.encryption.key")
    values = re.compile(DEFAULT_CONF["spark.redaction.string.regex"])
    assert values.sub("*", "mysql://cdc:pw123@db:3306/shop") == "mysql*@db:3306/shop"
    assert "abc" not in values.sub("*", "connect with password=abc")


def test_a_connection_of_another_type_is_refused_naming_the_types_the_hook_takes(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CDC_MYSQL", json.dumps({"conn_type": "mysql", "host": "db.example"}))
    with pytest.raises(ConfigurationError, match="is of type 'mysql'.*spark or spark_connect"):
        MySqlCdcSparkHook("cdc_mysql").target  # noqa: B018


@pytest.mark.parametrize("conn, setting, runner", [
    ({"conn_type": "spark_connect", "host": "connect.example", "port": 15002,
      "extra": {"server_credentials_file": "/etc/mysqlcdc/server.json"}}, "shared", SparkConnectJobRunner),
    ({"conn_type": "spark", "host": "spark://master.example", "port": 7077}, "shared", SparkJobRunner),
    (None, "shared", LocalSparkJobRunner),
    (None, "submit", SparkJobRunner),
])
def test_the_hook_chooses_the_runner_by_connection_and_local_spark_setting(monkeypatch, conn, setting, runner):
    monkeypatch.setenv("AIRFLOW__MYSQLCDC__LOCAL_SPARK", setting)
    if conn:
        monkeypatch.setenv("AIRFLOW_CONN_CDC_SPARK", json.dumps(conn))
    hook = MySqlCdcSparkHook("cdc_spark" if conn else None, spark_master="local[2]")
    chosen = hook.runner(name="mysqlcdc d.t", log=logging.getLogger("test"))
    assert type(chosen) is runner
