"""What a Spark Connect client keeps to itself: the URL's token, in its private file and out of logs."""

from __future__ import annotations

import pickle

import pytest

from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.spark.connect import (CarriedCredentials, add_session_to_private_file, server_address,
                                                     session_from_private_file)
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials


def test_a_detached_programs_connect_url_and_conf_travel_in_its_private_file(tmp_path):
    source = SourceConfig(host="db", port=3306, user="cdc", password="pw")
    path = source.to_private_file(tmp_path / "source.json")
    add_session_to_private_file(path, "sc://connect:15002/;token=s3cret", {"spark.sql.shuffle.partitions": "8"})
    assert session_from_private_file(path) == ("sc://connect:15002/;token=s3cret", {"spark.sql.shuffle.partitions": "8"})
    assert SourceConfig.from_private_file(path) == source  # the source's settings are still read alone
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_private_file_without_a_session_says_so(tmp_path):
    path = SourceConfig(host="db", port=3306, user="cdc", password="pw").to_private_file(tmp_path / "source.json")
    assert session_from_private_file(path) is None


def test_the_logged_server_address_leaves_the_token_out():
    assert server_address("sc://connect.internal:15002/;token=s3cret;use_ssl=true") == "connect.internal:15002"


def test_carried_credentials_survive_pickling_and_never_show_in_repr(monkeypatch):
    store = ObjectStoreCredentials({"AWS_SECRET_ACCESS_KEY": "k3y"})
    carried = pickle.loads(pickle.dumps(CarriedCredentials(SourceConfig(host="db", port=1, user="u", password="pw"),
                                                           store)))
    assert "pw" not in repr(carried) and "k3y" not in repr(carried)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    carried.install()
    import os

    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "k3y"


def test_the_stream_needs_exactly_one_way_to_its_credentials():
    from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
    from airflow_provider_mysqlcdc.spark.stream_job import run_stream_job

    source = SourceConfig(host="db", port=1, user="u", password="pw")
    with pytest.raises(ValueError, match="either source_file or carried"):
        run_stream_job(None, source, StreamJob(state="/tmp/s", sink_root="/tmp/l"))
