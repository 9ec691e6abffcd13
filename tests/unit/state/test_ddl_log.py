"""The DDL log (state/ddl_log.py): what the stream's policy did with each statement of a captured table."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.state.ddl_log import KEEP, latest_ddl, read_ddl_log, record_ddl
from airflow_provider_mysqlcdc.state.registry import PipelineState

T, U = TableId("shop", "t"), TableId("shop", "u")


def test_a_statement_met_again_keeps_one_entry_with_the_outcome_of_its_latest_meeting(tmp_path):
    state = PipelineState(str(tmp_path))
    at = BinlogOffset("binlog.000001", 400)
    record_ddl(state, at, "ALTER TABLE t ADD c INT", "fail", {T: "refused: the stream stopped before it"})
    record_ddl(state, at, "ALTER TABLE t ADD c INT", "evolve", {T: "column(s) c added to the sink"})
    assert [(e.policy, e.outcome) for e in read_ddl_log(state).entries] == [("evolve", "column(s) c added to the sink")]


def test_each_table_shows_its_latest_statements_and_the_log_keeps_a_bounded_number(tmp_path):
    state = PipelineState(str(tmp_path))
    for n in range(KEEP + 5):
        record_ddl(state, BinlogOffset("binlog.000001", 100 + n), f"ALTER TABLE t COMMENT '{n}'", "lenient",
                   {T if n % 2 else U: "no column change for the sink"})
    log = read_ddl_log(state)
    assert len(log.entries) == KEEP
    assert [e.offset.position for e in latest_ddl(log, T)] == [99 + KEEP, 101 + KEEP, 103 + KEEP]
    record_ddl(state, BinlogOffset("binlog.000002", 4), "CREATE TABLE other (id INT)", "lenient", {})
    assert len(read_ddl_log(state).entries) == KEEP  # nothing of a statement no captured table met
