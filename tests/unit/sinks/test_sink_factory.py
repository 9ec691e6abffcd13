"""Opening a sink (sinks/factory.py): the registry of table formats, the one place that names them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import airflow_provider_mysqlcdc
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.factory import SINK_FORMATS, open_sink, sink_format

PACKAGE = Path(airflow_provider_mysqlcdc.__file__).parent


def test_the_default_format_opens_a_sink_at_the_location_with_its_options(tmp_path):
    sink = open_sink(SinkSpec(str(tmp_path / "lake") + "/"), {"timeout": "30s"})
    assert isinstance(sink, Sink)
    assert sink.root == str(tmp_path / "lake") and sink.storage_options == {"timeout": "30s"}


def test_an_unknown_format_is_refused_naming_the_formats_there_are(tmp_path):
    with pytest.raises(ConfigurationError, match="unknown sink format 'parquet'.*delta"):
        open_sink(SinkSpec(str(tmp_path), "parquet"))
    assert next(iter(SINK_FORMATS)) == "delta"


def test_a_merge_mode_its_format_lacks_is_refused_naming_the_modes_it_has(tmp_path, monkeypatch):
    monkeypatch.setattr(type(sink_format(SinkSpec(str(tmp_path), "iceberg"))), "merge_modes", ("copy-on-write",))
    with pytest.raises(ConfigurationError, match="iceberg sink merges copy-on-write, not 'merge-on-read'"):
        open_sink(SinkSpec(str(tmp_path), "iceberg", merge_mode="merge-on-read"))
    with pytest.raises(ConfigurationError, match="merge_mode must be one of"):
        SinkSpec(str(tmp_path), "delta", merge_mode="mor")


@pytest.mark.parametrize("name", ["delta", "iceberg"])
def test_a_sink_takes_each_merge_mode_and_the_spec_carries_it(tmp_path, name):
    for mode in ("copy-on-write", "merge-on-read"):
        assert open_sink(SinkSpec(str(tmp_path), name, merge_mode=mode)).merge_mode == mode  # type: ignore[attr-defined]


def test_every_registered_format_opens_its_sink_and_is_named_as_registered(tmp_path):
    for name in SINK_FORMATS:
        spec = SinkSpec(str(tmp_path / name), name)
        assert sink_format(spec).name == name
        assert isinstance(open_sink(spec), Sink)


def test_nothing_outside_sinks_branches_on_a_formats_name():
    """A format is added in sinks/<format>/ and the registry: no operator, record or lineage compares a
    format's name (``sink_format == "iceberg"``) or imports a format's module."""
    found = {}
    for module in PACKAGE.rglob("*.py"):
        if module.relative_to(PACKAGE).parts[0] == "sinks":
            continue
        tree = ast.parse(module.read_text())
        compared = {node.value for compare in ast.walk(tree) if isinstance(compare, ast.Compare)
                    for node in ast.walk(compare) if isinstance(node, ast.Constant) and node.value in SINK_FORMATS}
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                    and any(node.module.startswith(f"airflow_provider_mysqlcdc.sinks.{name}") for name in SINK_FORMATS)}
        if compared | imported:
            found[str(module.relative_to(PACKAGE))] = compared | imported
    assert found == {}


def test_nothing_outside_sinks_names_a_formats_class():
    named = {}
    assert len(list(PACKAGE.rglob("*.py"))) > 50  # the package itself, not an empty folder
    for module in PACKAGE.rglob("*.py"):
        if module.relative_to(PACKAGE).parts[0] == "sinks":
            continue
        names = {node.id for node in ast.walk(ast.parse(module.read_text())) if isinstance(node, ast.Name)}
        imported = {alias.name for node in ast.walk(ast.parse(module.read_text()))
                    if isinstance(node, ast.ImportFrom) for alias in node.names}
        if found := {"DeltaSink", "IcebergSink", "DeltaFormat", "IcebergFormat"} & (names | imported):
            named[str(module.relative_to(PACKAGE))] = found
    assert named == {}
