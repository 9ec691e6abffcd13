import json
import os
import stat

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.server import ServerInfo


def test_password_never_in_repr_and_private_file_is_owner_only(tmp_path):
    config = SourceConfig(host="db", port=3307, user="cdc", password="s3cr3t-pw")
    assert "s3cr3t-pw" not in repr(config) and "s3cr3t-pw" not in str(config)
    path = config.to_private_file(tmp_path / "source.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert SourceConfig.from_private_file(path) == config
    assert json.loads(path.read_text())["password"] == "s3cr3t-pw"


def test_from_env_and_url():
    env = {"MYSQLCDC_SOURCE_HOST": "h", "MYSQLCDC_SOURCE_PORT": "3310", "MYSQLCDC_SOURCE_USER": "u",
           "MYSQLCDC_SOURCE_PASSWORD": "p"}
    assert SourceConfig.from_env(env) == SourceConfig(host="h", port=3310, user="u", password="p")
    assert SourceConfig.from_url("mysql://u:p%40ss@h:3311/db") == SourceConfig("h", 3311, "u", "p@ss", "db")
    with pytest.raises(ConfigurationError, match="MYSQLCDC_SOURCE_HOST"):
        SourceConfig.from_env({})
    with pytest.raises(ConfigurationError, match="Not a mysql:// URL"):
        SourceConfig.from_url("postgres://u:secret@h/db")


@pytest.mark.parametrize("version, statement", [
    ("8.4.3", True), ("8.2.0", True), ("8.0.36", False), ("5.7.44-log", False), ("10.11.19-MariaDB-0+deb12u1", False),
])
def test_binlog_status_statement_by_server_version(version, statement):
    numbers = version.split("-")[0].split(".")
    info = ServerInfo(version, "mariadb" in version.lower(), int(numbers[0]), int(numbers[1]))
    assert info.has_binary_log_status is statement


def test_the_function_spark_ships_to_executors_holds_the_private_files_path_not_the_password(tmp_path):
    from pyspark import cloudpickle

    from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
    from airflow_provider_mysqlcdc.cdc.model.split import SnapshotSplit
    from airflow_provider_mysqlcdc.spark.chunk_job import partition_reader

    source = SourceConfig(host="db", port=3306, user="cdc", password="s3cret-pw")
    private_file = source.to_private_file(tmp_path / "secrets" / "source.json")
    table = TableId("shop", "orders")
    schema = TableSchema(table, (Column(name="id", data_type="int", column_type="int(11)", nullable=False),), ("id",))
    shipped = cloudpickle.dumps(partition_reader(source.for_executors(str(private_file)), schema,
                                                 [SnapshotSplit(table, 0, "id")]))
    assert b"s3cret-pw" not in shipped and str(private_file).encode() in shipped


def test_settings_for_executors_read_the_password_from_the_private_file(tmp_path):
    source = SourceConfig(host="db", port=3306, user="cdc", password="s3cret-pw")
    private_file = source.to_private_file(tmp_path / "source.json")
    executors = source.for_executors(str(private_file))
    assert executors.password == "" and executors.secret == "s3cret-pw"
    assert executors.replication_settings()["password"] == "s3cret-pw"
    assert "s3cret-pw" not in repr(executors)
