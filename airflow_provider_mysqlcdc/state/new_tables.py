"""Tables the stream saw start to match the pipeline's table patterns (``progress/new-tables.json``).

A ``CREATE TABLE`` (or a rename into a name) that a pattern of the pipeline matches is not captured
by the running stream: the next DAG run's plan resolves the patterns again and captures the table
(snapshotted, or per ``startup_mode``), as Flink CDC's ``scan.binlog.newly-added-table`` does with a
restart. The stream records it here meanwhile, so that ``bin/status`` and the UI page say that a run
is due, and the stream's log says so when it happens.
"""

from __future__ import annotations

import time

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.progress import NewTable, NewTables
from airflow_provider_mysqlcdc.state.registry import PipelineState

NEW_TABLES = "new-tables.json"
#: tables kept (the oldest are dropped beyond this many)
KEEP = 50


def new_tables(state: PipelineState) -> NewTables:
    return state.read_progress(NewTables, NEW_TABLES) or NewTables()


def record_new_table(state: PipelineState, table_id: TableId, offset: BinlogOffset, statement: str) -> bool:
    """Add the table (seen at ``offset``); False when it was recorded already (a replayed batch)."""
    seen = new_tables(state)
    if any(t.table == table_id.quoted and t.offset == offset for t in seen.tables):
        return False
    tables = (*seen.tables, NewTable(table_id.quoted, offset, statement[:300], time.time()))
    state.write_progress(NEW_TABLES, NewTables(tables[-KEEP:]))
    return True


def pending_new_tables(state: PipelineState, captured: set[TableId]) -> list[NewTable]:
    """The recorded tables not captured yet: the next run captures them."""
    return [t for t in new_tables(state).tables if TableId.parse(t.table) not in captured]
