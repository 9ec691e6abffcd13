"""Opening a sink (sinks/factory.py): the one place that names a table format's class."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import airflow_provider_mysqlcdc
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.factory import SINK_FORMATS, open_sink

PACKAGE = Path(airflow_provider_mysqlcdc.__file__).parent


def test_the_default_format_opens_a_sink_at_the_location_with_its_options(tmp_path):
    sink = open_sink(str(tmp_path / "lake") + "/", {"timeout": "30s"})
    assert isinstance(sink, Sink)
    assert sink.root == str(tmp_path / "lake") and sink.storage_options == {"timeout": "30s"}


def test_an_unknown_format_is_refused_naming_the_formats_there_are(tmp_path):
    with pytest.raises(ConfigurationError, match="unknown sink format 'parquet'.*delta"):
        open_sink(str(tmp_path), sink_format="parquet")
    assert SINK_FORMATS[0] == "delta"


def test_nothing_outside_sinks_names_a_formats_class():
    named = {}
    assert len(list(PACKAGE.rglob("*.py"))) > 50  # the package itself, not an empty folder
    for module in PACKAGE.rglob("*.py"):
        if module.relative_to(PACKAGE).parts[0] == "sinks":
            continue
        names = {node.id for node in ast.walk(ast.parse(module.read_text())) if isinstance(node, ast.Name)}
        imported = {alias.name for node in ast.walk(ast.parse(module.read_text()))
                    if isinstance(node, ast.ImportFrom) for alias in node.names}
        if found := {"DeltaSink"} & (names | imported):
            named[str(module.relative_to(PACKAGE))] = found
    assert named == {}
