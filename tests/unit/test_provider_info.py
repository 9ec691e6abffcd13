"""The provider's metadata for Airflow (get_provider_info.py): valid for Airflow, and the options it
declares have the defaults the code falls back to."""

from __future__ import annotations

import json
from importlib.resources import files

import jsonschema

from airflow_provider_mysqlcdc.get_provider_info import get_provider_info
from airflow_provider_mysqlcdc.operators.spark_job import local_spark_setting
from airflow_provider_mysqlcdc.spark.local_server import DEFAULT_IDLE_S


def test_the_provider_info_is_valid_for_airflows_schema():
    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_the_declared_options_have_the_codes_defaults(monkeypatch):
    monkeypatch.delenv("AIRFLOW__MYSQLCDC__LOCAL_SPARK", raising=False)
    options = get_provider_info()["config"]["mysqlcdc"]["options"]
    assert options["local_spark"]["default"] == local_spark_setting() == "shared"
    assert float(options["local_spark_idle_s"]["default"]) == DEFAULT_IDLE_S
