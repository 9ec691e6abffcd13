"""The builder's task graph, parsed with the real Airflow SDK (no metadata DB needed to parse)."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.pipeline import mysqlcdc_params, mysqlcdc_pipeline


def test_graph_has_a_group_per_parse_time_table_and_one_for_trigger_time_tables():
    with DAG("cdc", schedule=None, max_active_runs=1, params=mysqlcdc_params(sink_root="/lake")) as dag:
        mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state", tables_param=True,
                          spark_conf={"spark.executor.memory": "2g"})
    assert set(dag.task_ids) == {"shop__orders.plan", "shop__orders.snapshot", "param_tables.plan",
                                 "param_tables.snapshot", "collect_splits", "stream"}
    assert dag.get_task("stream").spark_conf == {"spark.executor.memory": "2g"}
    assert dag.get_task("collect_splits").downstream_task_ids == {"stream"}
    # one table's failed chunk task does not hold back the others' landing and the stream (collect.py)
    assert dag.get_task("collect_splits").trigger_rule == "all_done"


def test_a_dag_allowing_overlapping_runs_is_refused_when_parsed():
    with pytest.raises(ConfigurationError, match="allows 3 active runs.*max_active_runs=1"):
        with DAG("cdc_overlapping", schedule=None, max_active_runs=3):
            mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state")


def test_a_secret_in_spark_conf_is_refused_when_parsed():
    with pytest.raises(ConfigurationError, match="looks like a secret"):
        with DAG("cdc_secret", schedule=None, max_active_runs=1):
            mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state",
                              spark_conf={"spark.hadoop.fs.s3a.secret.key": "x"})


def test_a_pattern_gets_a_group_of_its_own_and_every_plan_the_exclude_list():
    with DAG("cdc_patterns", schedule=None, max_active_runs=1) as dag:
        mysqlcdc_pipeline(tables=["shop.orders", "shop.order_\\d+", "shop.order_[0-9]+"], sink_root="/lake",
                          state_dir="/state", exclude_tables=["shop.order_0"])
    groups = sorted({t.split(".")[0] for t in dag.task_ids} - {"collect_splits", "stream"})
    assert len(groups) == 3 and sum(g.startswith("pattern__shop_order_") for g in groups) == 2
    plan = dag.get_task(f"{groups[0]}.plan")
    assert plan.exclude_tables == "{{ params.exclude_tables | default(['shop.order_0']) }}"


def test_a_malformed_pattern_is_refused_when_parsed():
    with pytest.raises(ConfigurationError, match="is not a regular expression"):
        with DAG("cdc_bad_pattern", schedule=None, max_active_runs=1):
            mysqlcdc_pipeline(tables=["shop.order_(\\d+"], sink_root="/lake", state_dir="/state")


def test_no_table_is_planned_by_two_groups_names_come_first_then_earlier_patterns_then_the_dags_groups():
    tables = ["shop.order_\\d+", "shop.order_1", "shop.order_[0-9]+"]
    with DAG("cdc_precedence", schedule=None, max_active_runs=1, params=mysqlcdc_params(sink_root="/lake")) as dag:
        mysqlcdc_pipeline(tables=tables, sink_root="/lake", state_dir="/state", tables_param=True)
    plans = {t.tables[0] if isinstance(t.tables, list) else "param": t.leave_to_other_groups
             for t in dag.tasks if t.task_id.endswith(".plan")}
    assert plans == {"shop.order_\\d+": ["shop.order_1"], "shop.order_1": [],
                     "shop.order_[0-9]+": ["shop.order_\\d+", "shop.order_1"], "param": tables}


def test_the_stream_is_given_the_patterns_of_the_dag_file_and_of_the_trigger_time_tables():
    import jinja2

    from airflow_provider_mysqlcdc.operators.arguments import table_patterns

    with DAG("cdc_stream_patterns", schedule=None, max_active_runs=1, params=mysqlcdc_params(sink_root="/lake")) as dag:
        mysqlcdc_pipeline(tables=["shop.orders", "shop.order_\\d+"], sink_root="/lake", state_dir="/state",
                          tables_param=True)
    stream = dag.get_task("stream")
    rendered = jinja2.Template(stream.table_patterns).render(params={"tables": ["crm.*", "crm.people"]})
    assert table_patterns(rendered) == ["crm.*", "shop.order_\\d+"]
    assert table_patterns(jinja2.Template(stream.table_patterns).render(params={})) == ["shop.order_\\d+"]


def test_the_schema_change_policy_reaches_the_stream_and_an_unknown_one_fails_the_parse():
    with DAG("cdc_policy", schedule=None, max_active_runs=1) as dag:
        mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state", schema_changes="lenient")
    assert dag.get_task("stream").schema_changes == "lenient"
    with pytest.raises(ConfigurationError, match="schema_changes must be one of evolve, lenient, ignore, fail"):
        with DAG("cdc_bad_policy", schedule=None, max_active_runs=1):
            mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state", schema_changes="drop")


def test_column_rules_and_row_filters_reach_the_plan_and_a_bad_one_fails_the_parse():
    with DAG("cdc_rules", schedule=None, max_active_runs=1) as dag:
        mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state",
                          columns={"shop.orders": {"hash": ["email"]}}, row_filters={"shop.*": "id > 3"})
    [plan] = [t for t in dag.tasks if t.task_id.endswith(".plan")]
    assert plan.columns == {"shop.orders": {"hash": ["email"]}} and plan.row_filters == {"shop.*": "id > 3"}
    with pytest.raises(ConfigurationError, match="unknown option"):
        with DAG("cdc_bad_rule", schedule=None, max_active_runs=1):
            mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state",
                              columns={"shop.orders": {"mask": ["email"]}})
    with pytest.raises(ConfigurationError, match="expected a column name or a value"):
        with DAG("cdc_bad_filter", schedule=None, max_active_runs=1):
            mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state",
                              row_filters={"shop.orders": "id >"})


def test_the_snapshot_consistency_reaches_every_chunk_task_and_an_unknown_one_fails_the_parse():
    with DAG("cdc_consistency", schedule=None, max_active_runs=1) as dag:
        mysqlcdc_pipeline(tables=["shop.orders", "shop.items"], sink_root="/lake", state_dir="/state",
                          snapshot_consistency="at-least-once")
    chunks = [t for t in dag.tasks if t.task_id.endswith(".snapshot")]
    assert len(chunks) == 2 and all(t.partial_kwargs["snapshot_consistency"] == "at-least-once" for t in chunks)
    with pytest.raises(ConfigurationError, match="snapshot_consistency must be one of exactly-once, at-least-once"):
        with DAG("cdc_bad_consistency", schedule=None, max_active_runs=1):
            mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state",
                              snapshot_consistency="at-most-once")


def test_the_merge_mode_reaches_the_stream_and_every_chunk_task_and_one_the_format_lacks_fails_the_parse(monkeypatch):
    with DAG("cdc_merge_mode", schedule=None, max_active_runs=1) as dag:
        mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state", merge_mode="copy-on-write")
    assert dag.get_task("stream").sink_spec().merge_mode == "copy-on-write"
    chunks = [t for t in dag.tasks if t.task_id.endswith(".snapshot")]
    assert chunks and all(t.partial_kwargs["merge_mode"] == "copy-on-write" for t in chunks)
    from airflow_provider_mysqlcdc.sinks.iceberg.format import IcebergFormat

    monkeypatch.setattr(IcebergFormat, "merge_modes", ("copy-on-write",))  # a format of one merge mode
    with pytest.raises(ConfigurationError, match="iceberg sink merges copy-on-write, not 'merge-on-read'"):
        with DAG("cdc_bad_merge_mode", schedule=None, max_active_runs=1):
            mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state", sink_format="iceberg",
                              merge_mode="merge-on-read")


def test_per_table_merge_modes_reach_the_stream_and_every_chunk_task_and_a_malformed_one_fails_the_parse():
    modes = {"shop.audit": "copy-on-write"}
    with DAG("cdc_table_merge_modes", schedule=None, max_active_runs=1) as dag:
        mysqlcdc_pipeline(tables=["shop.orders", "shop.audit"], sink_root="/lake", state_dir="/state", merge_modes=modes)
    assert dag.get_task("stream").sink_spec().table_merge_modes == (("shop.audit", "copy-on-write"),)
    chunks = [t for t in dag.tasks if t.task_id.endswith(".snapshot")]
    assert chunks and all(t.partial_kwargs["merge_modes"] == modes for t in chunks)
    with pytest.raises(ConfigurationError, match=r"merge_modes\['shop.audit'\] must be one of"):
        with DAG("cdc_bad_table_merge_modes", schedule=None, max_active_runs=1):
            mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state",
                              merge_modes={"shop.audit": "rewrite"})
