"""Opening a sink (sinks/factory.py): the registry of table formats, the one place that names them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import airflow_provider_mysqlcdc
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink
from airflow_provider_mysqlcdc.sinks.factory import SINK_FORMATS, open_sink, sink_format
from airflow_provider_mysqlcdc.sinks.writer import SinkWriter, apply_change_batch
from tests.unit.stream.harness import off

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


def test_a_tables_merge_mode_is_the_first_entry_naming_it_by_name_or_pattern_else_the_pipelines():
    spec = SinkSpec("/lake", "delta", merge_mode="merge-on-read",
                    table_merge_modes={"shop.audit": "copy-on-write", r"shop.log_\d+": "copy-on-write",
                                       r"shop.log_7": "merge-on-read"})
    assert spec.merge_mode_of(TableId("shop", "audit"), "merge-on-read") == "copy-on-write"
    assert spec.merge_mode_of(TableId("shop", "log_7"), "merge-on-read") == "copy-on-write"  # the first entry decides
    assert spec.merge_mode_of(TableId("shop", "orders"), "copy-on-write") == "merge-on-read"
    assert SinkSpec.from_body(spec.to_body(), SinkSpec.FORMAT.version) == spec


@pytest.mark.parametrize("entries, message", [
    ({"shop.audit": "rewrite"}, r"merge_modes\['shop.audit'\] must be one of merge-on-read, copy-on-write"),
    ({"audit": "copy-on-write"}, "'audit'"),
    ({r"shop.log_(": "copy-on-write"}, r"log_\("),
    ([("shop.audit",)], "maps a table name or pattern to a merge mode"),
])
def test_a_malformed_table_merge_mode_is_refused_naming_the_entry(entries, message):
    with pytest.raises(ConfigurationError, match=message):
        SinkSpec("/lake", "delta", table_merge_modes=entries)


def test_a_table_merge_mode_its_format_lacks_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(type(sink_format(SinkSpec(str(tmp_path), "iceberg"))), "merge_modes", ("copy-on-write",))
    with pytest.raises(ConfigurationError, match=r"not 'merge-on-read' \(merge_modes\['shop.t'\]\)"):
        open_sink(SinkSpec(str(tmp_path), "iceberg", table_merge_modes={"shop.t": "merge-on-read"}))


@pytest.mark.parametrize("name", ["delta", "iceberg"])
def test_a_table_named_copy_on_write_is_merged_by_rewrite_while_the_others_get_deletes(tmp_path, name):
    from tests.unit.stream.harness import schema, update

    sink = open_sink(SinkSpec(str(tmp_path / "lake"), name, merge_mode="merge-on-read",
                              table_merge_modes={"shop.kept": "copy-on-write"}))
    for table in ("kept", "marked"):
        table_id = TableId("shop", table)
        writer = SinkWriter(sink, schema(table_id), "id", KeyOrdering(schema(table_id).columns[0]))
        sink.prepare(writer.schema)
        writer.write_split(FinishedSplit(SnapshotSplit(table_id, 0, "id", None, None), off(5)),
                           [{"id": i} for i in range(10)])
        apply_change_batch({table_id: writer}, [update(table_id, 9, {"id": 3}, {"id": 3})], app_id="a", batch_id=1)
    assert not marks_rows_deleted(sink, TableId("shop", "kept")) and marks_rows_deleted(sink, TableId("shop", "marked"))


def marks_rows_deleted(sink: Sink, table_id: TableId) -> bool:
    """Whether the table holds rows marked deleted: Delta deletion vectors, Iceberg delete files."""
    if "iceberg" in type(sink).__module__:
        table = sink.open_table(table_id)  # type: ignore[attr-defined]
        return int(table.current_snapshot().summary.get("total-position-deletes", 0)) > 0
    from deltalake import DeltaTable

    from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog

    uri = sink.table_uri(table_id)
    return any(f.vector is not None for f in DeltaLog(uri).files(DeltaTable(uri)).values())
