"""The DDL the stream met of each captured table, and what its ``schema_changes`` policy did with it
(``progress/ddl-log.json``): the stream's log says it in one line per statement, and ``bin/status``
and the UI page show each table's latest ones from here.

A batch replayed after a restart meets the same statements again: each is recorded once per table
and offset, with the outcome of its latest meeting (a statement refused under ``fail``, then
followed under ``evolve``, shows what ``evolve`` did).
"""

from __future__ import annotations

import time

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.progress import DdlLog, DdlMet
from airflow_provider_mysqlcdc.state.registry import PipelineState

DDL_LOG = "ddl-log.json"
#: entries kept (the oldest are dropped beyond this many)
KEEP = 200


def read_ddl_log(state: PipelineState) -> DdlLog:
    return state.read_progress(DdlLog, DDL_LOG) or DdlLog()


def record_ddl(state: PipelineState, offset: BinlogOffset, statement: str, policy: str,
               outcomes: dict[TableId, str]) -> None:
    """Record what ``policy`` did with the statement at ``offset`` to each table of ``outcomes``."""
    if not outcomes:
        return
    met = {t.quoted for t in outcomes}
    kept = [e for e in read_ddl_log(state).entries if not (e.offset == offset and e.table in met)]
    now = time.time()
    entries = (*kept, *(DdlMet(t.quoted, offset, statement[:300], policy, outcome, now)
                        for t, outcome in sorted(outcomes.items())))
    state.write_progress(DDL_LOG, DdlLog(entries[-KEEP:]))


def latest_ddl(log: DdlLog, table_id: TableId, count: int = 3) -> list[DdlMet]:
    """The table's latest ``count`` statements, newest last."""
    return [e for e in log.entries if e.table == table_id.quoted][-count:]
