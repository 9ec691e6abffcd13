"""What a Spark Connect client keeps to itself: the URL's token in its private file and out of logs;
the source's password and the object store's keys in a private file on the server, never in what it
sends there."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.spark.connect import ConnectSession, main, server_address, write_server_credentials_file
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials, install_from_private_file

SOURCE = SourceConfig(host="db", port=3306, user="cdc", password="pw")


def test_a_detached_programs_connect_session_travels_in_its_private_file(tmp_path):
    path = SOURCE.to_private_file(tmp_path / "source.json")
    session = ConnectSession("sc://connect:15002/;token=s3cret", {"spark.sql.shuffle.partitions": "8"},
                             "/etc/mysqlcdc/server.json")
    session.add_to_private_file(path)
    assert ConnectSession.from_private_file(path) == session
    assert "s3cret" not in repr(session)
    assert SourceConfig.from_private_file(path) == SOURCE  # the source's settings are still read alone
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_private_file_without_a_session_says_so(tmp_path):
    assert ConnectSession.from_private_file(SOURCE.to_private_file(tmp_path / "source.json")) is None


def test_the_logged_server_address_leaves_the_token_out():
    assert server_address("sc://connect.internal:15002/;token=s3cret;use_ssl=true") == "connect.internal:15002"


def test_the_servers_credentials_file_gives_its_workers_the_password_and_the_object_store(tmp_path, monkeypatch):
    path = write_server_credentials_file(tmp_path / "etc" / "server.json", "pw",
                                         ObjectStoreCredentials({"AWS_SECRET_ACCESS_KEY": "k3y"}))
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    shipped = SourceConfig.from_json(SOURCE.for_executors(str(path)).to_json())  # what travels to the server
    assert shipped.secret == "pw"
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    install_from_private_file(shipped.password_file)
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "k3y"


def test_source_settings_holding_the_password_are_never_serialised_for_spark():
    with pytest.raises(ValueError, match="hold the password"):
        SOURCE.to_json()
    assert "pw" not in SOURCE.for_executors("/etc/mysqlcdc/server.json").to_json()


def test_a_missing_server_credentials_file_is_a_clear_error(tmp_path):
    shipped = SOURCE.for_executors(str(tmp_path / "absent.json"))
    with pytest.raises(ConfigurationError, match="absent.json.*server_credentials_file.*on the Spark Connect server"):
        shipped.secret  # noqa: B018 - reading it raises


def test_the_command_writes_the_servers_file_with_the_password_from_the_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MYSQLCDC_SOURCE_PASSWORD", "pw")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id-1")
    assert main(["--write-server-file", str(tmp_path / "server.json"), "--with-aws-environment"]) == 0
    written = json.loads((tmp_path / "server.json").read_text())
    assert written["password"] == "pw" and written["object_store"]["AWS_ACCESS_KEY_ID"] == "id-1"
    assert '"server_credentials_file"' in capsys.readouterr().out


def test_the_stream_needs_the_private_file_its_spark_side_reads():
    from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
    from airflow_provider_mysqlcdc.spark.stream_job import run_stream_job

    with pytest.raises(ValueError, match="needs source_file"):
        run_stream_job(None, SOURCE, StreamJob(state="/tmp/s", sink=SinkSpec("/tmp/l")), source_file="")


@pytest.mark.parametrize("sink_format", ["delta", "iceberg"])
def test_the_batch_function_pickles_for_the_server_after_its_sink_was_used_without_its_lock(tmp_path, sink_format):
    """On Spark Connect the stream's foreachBatch function is pickled to the server (with Spark's
    cloudpickle) once the driver has used its sink (an Iceberg sink's catalog open); its lock against
    maintenance is made anew there, and its sink opens what it needs there."""
    from pyspark import cloudpickle

    from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
    from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
    from airflow_provider_mysqlcdc.spark.stream_job import StreamBatchFunction

    batches = StreamBatchFunction(SOURCE.for_executors(str(tmp_path / "source.json")),
                                  StreamJob(str(tmp_path / "state"), SinkSpec(str(tmp_path / "lake"), sink_format)))
    table = TableId("shop", "t")
    batches.sink.prepare(TableSchema(table, (Column("id", "int", "int", False),), ("id",)))
    copy = cloudpickle.loads(cloudpickle.dumps(batches))
    assert copy.steps.applying is not batches.steps.applying and copy.steps.applying.acquire(blocking=False)
    assert copy.steps.applier is copy.applier and copy.steps.upkeep is copy.upkeep
    assert copy.applier.job == batches.applier.job and "pw" not in str(cloudpickle.dumps(batches))
    assert "id" in copy.sink.column_names(table)
