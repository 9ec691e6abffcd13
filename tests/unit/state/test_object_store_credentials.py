"""Object-store credentials (state/credentials.py): from an Airflow ``aws`` connection's fields to
the variables fsspec and delta-rs read, through the private file a Spark program gets, never shown."""

from __future__ import annotations

import json
import os

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob, default_checkpoint
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.state import credentials
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials, install_from_private_file

SECRET = "wJalrXUtnFEMI-secret"


def test_an_aws_connection_becomes_the_variables_both_libraries_read():
    creds = ObjectStoreCredentials.from_aws_connection(
        conn_id="lake", login="AKIA1", password=SECRET,
        extra={"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1", "aws_session_token": "tok"})
    assert creds.variables == {"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": SECRET,
                               "AWS_SESSION_TOKEN": "tok", "AWS_REGION": "eu-west-1",
                               "AWS_DEFAULT_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                               "AWS_ALLOW_HTTP": "true"}


def test_the_s3_service_config_of_amazons_provider_is_read_too():
    creds = ObjectStoreCredentials.from_aws_connection(
        conn_id="lake", login=None, password=None, extra={"service_config": {"s3": {"endpoint_url": "https://s3.x"}}})
    assert creds.variables == {"AWS_ENDPOINT_URL": "https://s3.x"}  # no keys: the machine's own credentials


def test_a_login_without_a_password_is_refused_naming_the_connection():
    with pytest.raises(ConfigurationError, match="Connection 'lake' has a login but no password"):
        ObjectStoreCredentials.from_aws_connection(conn_id="lake", login="AKIA1", password=None, extra={})


def test_their_repr_shows_no_secret():
    creds = ObjectStoreCredentials({"AWS_SECRET_ACCESS_KEY": SECRET})
    assert SECRET not in repr(creds) and SECRET not in str(creds)


def test_they_travel_in_the_private_file_beside_the_source_which_still_reads_back(tmp_path, monkeypatch):
    source = SourceConfig(host="db", password="pw")
    path = source.to_private_file(tmp_path / "secrets" / "source.json")
    ObjectStoreCredentials({"AWS_SECRET_ACCESS_KEY": SECRET}).add_to_private_file(path)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert SourceConfig.from_private_file(path) == source
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    install_from_private_file(path)
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == SECRET


def test_a_private_file_without_them_installs_nothing(tmp_path, monkeypatch):
    path = SourceConfig(host="db").to_private_file(tmp_path / "source.json")
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(credentials, "_installed", set())  # a process no file installed anything in yet
    before = dict(os.environ)
    install_from_private_file(path)
    assert os.environ == before and "object_store" not in json.loads(path.read_text())


def test_a_later_sessions_file_takes_away_what_an_earlier_one_installed_and_nothing_else(tmp_path, monkeypatch):
    """A Python worker of a shared server runs one pipeline's session after another's: the second
    must not write with the first one's keys, nor lose the machine's own settings."""
    monkeypatch.setattr(os, "environ", dict(os.environ, AWS_CONFIG_FILE="/etc/aws.cfg"))
    monkeypatch.setattr(credentials, "_installed", set())
    first = SourceConfig(host="db").to_private_file(tmp_path / "first.json")
    ObjectStoreCredentials({"AWS_ACCESS_KEY_ID": "first", "AWS_REGION": "eu"}).add_to_private_file(first)
    second = SourceConfig(host="db").to_private_file(tmp_path / "second.json")
    ObjectStoreCredentials({"AWS_REGION": "us"}).add_to_private_file(second)  # an instance profile's keys
    install_from_private_file(first)
    assert (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_REGION"]) == ("first", "eu")
    install_from_private_file(second)
    assert "AWS_ACCESS_KEY_ID" not in os.environ and os.environ["AWS_REGION"] == "us"
    assert os.environ["AWS_CONFIG_FILE"] == "/etc/aws.cfg"


def test_the_stream_checkpoint_stays_in_a_state_location_spark_can_write():
    assert default_checkpoint("/data/state/p") == "/data/state/p/checkpoint"
    assert default_checkpoint("hdfs://nn/state/p/") == "hdfs://nn/state/p/checkpoint"


def test_the_stream_checkpoint_of_a_state_on_an_object_store_is_a_folder_of_the_driver():
    local = default_checkpoint("s3://bucket/state/p")
    assert local.startswith("/") and "mysqlcdc-checkpoints" in local
    assert local == default_checkpoint("s3://bucket/state/p/") != default_checkpoint("s3://bucket/state/q")
    assert StreamJob(state="gs://bucket/state/p", sink=SinkSpec("gs://bucket/lake")).checkpoint == \
        default_checkpoint("gs://bucket/state/p")
