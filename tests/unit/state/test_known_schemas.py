"""Which schema the pipeline remembers of a table across a key change the stream has not reached
(state/schemas.py): a plan in between keeps the one the stream's pending changes need."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas

TABLE = TableId("shop", "k")
OLD = TableSchema(TABLE, (Column("id", "int", "int(10) unsigned", False, unsigned=True),
                          Column("v", "int", "int(11)", True)), ("id",))
RENAMED = TableSchema(TABLE, (Column("collection_id", "int", "int(10) unsigned", False, unsigned=True),
                              Column("v", "int", "int(11)", True)), ("collection_id",))
ADDED = TableSchema(TABLE, OLD.columns + (Column("note", "varchar", "varchar(10)", True),), ("id",))


def _known(tmp_path) -> KnownSchemas:
    known = KnownSchemas(PipelineState(str(tmp_path / "state")))
    known.remember(OLD)
    return known


def test_a_plan_keeps_the_schema_the_captured_chunk_key_needs_while_the_server_has_renamed_it(tmp_path):
    known = _known(tmp_path)
    known.remember_planned(RENAMED, "id")
    assert KnownSchemas(known.state).remembered(TABLE) == OLD


def test_a_plan_remembers_a_change_the_pending_changes_do_not_depend_on(tmp_path):
    known = _known(tmp_path)
    known.remember_planned(ADDED, "id")
    assert KnownSchemas(known.state).remembered(TABLE) == ADDED


def test_a_plan_remembers_the_new_schema_once_the_table_is_captured_under_its_new_key(tmp_path):
    known = _known(tmp_path)
    known.remember_planned(RENAMED, "collection_id")
    assert KnownSchemas(known.state).remembered(TABLE) == RENAMED


def test_a_plan_remembers_a_table_it_does_not_capture_yet(tmp_path):
    known = _known(tmp_path)
    known.remember_planned(RENAMED, None)
    assert KnownSchemas(known.state).remembered(TABLE) == RENAMED
