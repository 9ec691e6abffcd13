"""The provider's metadata for Airflow (get_provider_info.py): valid for Airflow, the options it
declares have the defaults the code falls back to, and the operators, hooks and triggers it lists
are those the package exports (docs/api.md)."""

from __future__ import annotations

import json
from importlib.resources import files

import jsonschema
from airflow.sdk import BaseHook, BaseOperator
from airflow.triggers.base import BaseTrigger

import airflow_provider_mysqlcdc
from airflow_provider_mysqlcdc.get_provider_info import get_provider_info
from airflow_provider_mysqlcdc.hooks.spark import local_spark_setting
from airflow_provider_mysqlcdc.launch.local_server import DEFAULT_IDLE_S


def test_the_provider_info_is_valid_for_airflows_schema():
    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_the_declared_options_have_the_codes_defaults(monkeypatch):
    monkeypatch.delenv("AIRFLOW__MYSQLCDC__LOCAL_SPARK", raising=False)
    options = get_provider_info()["config"]["mysqlcdc"]["options"]
    assert options["local_spark"]["default"] == local_spark_setting() == "shared"
    assert float(options["local_spark_idle_s"]["default"]) == DEFAULT_IDLE_S


def _modules(kind: str) -> list[str]:
    return [module for entry in get_provider_info()[kind] for module in entry["python-modules"]]


def _exported_subclasses(base: type) -> set[type]:
    exported = (getattr(airflow_provider_mysqlcdc, name) for name in airflow_provider_mysqlcdc.__all__)
    return {value for value in exported if isinstance(value, type) and issubclass(value, base)}


def test_the_operator_modules_are_those_of_the_exported_operators():
    assert set(_modules("operators")) == {op.__module__ for op in _exported_subclasses(BaseOperator)}


def test_the_hook_modules_are_those_of_the_exported_hooks():
    assert set(_modules("hooks")) == {hook.__module__ for hook in _exported_subclasses(BaseHook)}


def test_the_trigger_modules_are_those_of_the_exported_triggers():
    assert set(_modules("triggers")) == {trigger.__module__ for trigger in _exported_subclasses(BaseTrigger)}


def test_every_connection_types_hook_is_exported_under_its_class_name():
    for connection_type in get_provider_info()["connection-types"]:
        module, _, name = connection_type["hook-class-name"].rpartition(".")
        assert getattr(airflow_provider_mysqlcdc, name).__module__ == module
        assert getattr(airflow_provider_mysqlcdc, name).conn_type == connection_type["connection-type"]


def test_operators_hooks_and_triggers_belong_to_the_declared_integration():
    info = get_provider_info()
    declared = {integration["integration-name"] for integration in info["integrations"]}
    used = {entry["integration-name"] for kind in ("operators", "hooks", "triggers") for entry in info[kind]}
    assert used == declared == {"MySQL CDC"}
