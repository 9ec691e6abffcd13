"""The one-call builder: tables in, the whole task graph out.

    with DAG("orders_cdc", schedule=None) as dag:
        mysqlcdc_pipeline(tables=["shop.orders", "shop.customers"], sink_root="/lake", state_dir="/state")

Per table named here, a task group ``<db>__<table>`` holds ``plan`` (preflight + split planning) and
``snapshot``, one mapped task instance per chunk, named by table and chunk in the UI. Tables given at
trigger time (the DAG param ``tables``, when ``tables_param=True``) cannot get groups of their own:
Airflow refuses to map inside a mapped task group, so they share one group ``param_tables`` whose
``plan`` covers them all and whose ``snapshot`` is mapped over all their chunks; each chunk is still
one retryable task instance, labelled with its table. Then ``collect_splits`` writes the finished
splits to ``<state_dir>/<dag_id>/seed.json`` and ``stream`` runs the binlog stream from it with its
checkpoint in ``<state_dir>/<dag_id>/checkpoint``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from airflow.sdk import TaskGroup

from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.operators.snapshot import (DEFAULT_CHUNK_ROWS, DEFAULT_SPLIT_ROWS,
                                                         MySqlCdcCollectSplitsOperator, MySqlCdcPlanOperator,
                                                         MySqlCdcSnapshotOperator, parse_tables)
from airflow_provider_mysqlcdc.operators.stream import MySqlCdcStreamOperator


def group_id_for(table: str) -> str:
    table_id = parse_tables([table])[0]
    return re.sub(r"[^A-Za-z0-9_]", "_", f"{table_id.database}__{table_id.table}")


def mysqlcdc_pipeline(*, tables: Sequence[str], sink_root: str, state_dir: str,
                      mysqlcdc_conn_id: str = MySqlCdcHook.default_conn_name, split_rows: int = DEFAULT_SPLIT_ROWS,
                      chunk_rows: int = DEFAULT_CHUNK_ROWS, stream_mode: str = "available-now",
                      spark_master: str = "local[2]", changelog: bool = False,
                      tables_param: bool = False) -> dict[str, Any]:
    """Build the graph in the current DAG. With ``tables_param``, declare the DAG params ``tables``,
    ``split_rows`` and ``chunk_rows`` (``Param`` in the DAG's ``params``) and plan those tables too."""
    plans, snapshots = [], []
    groups = [(group_id_for(t), [t], split_rows, chunk_rows) for t in tables]
    if tables_param:
        groups.append(("param_tables", "{{ params.tables }}", "{{ params.split_rows }}", "{{ params.chunk_rows }}"))
    for group_id, group_tables, group_split_rows, group_chunk_rows in groups:
        with TaskGroup(group_id=group_id):
            plan = MySqlCdcPlanOperator(task_id="plan", tables=group_tables, mysqlcdc_conn_id=mysqlcdc_conn_id,
                                        split_rows=group_split_rows, chunk_rows=group_chunk_rows,
                                        allow_no_tables=group_id == "param_tables")
            snapshot = MySqlCdcSnapshotOperator.partial(
                task_id="snapshot", sink_root=sink_root, mysqlcdc_conn_id=mysqlcdc_conn_id, spark_master=spark_master,
                map_index_template="{{ task.chunk['label'] }}",
            ).expand(chunk=plan.output)
        plans.append(plan.output)
        snapshots.append(snapshot.output)
    state = f"{state_dir.rstrip('/')}/{{{{ dag.dag_id }}}}"
    # none_failed: a param group with no tables maps to zero chunks, which Airflow marks skipped
    collect = MySqlCdcCollectSplitsOperator(task_id="collect_splits", plans=plans, results=snapshots,
                                            state_path=f"{state}/seed.json", trigger_rule="none_failed")
    stream = MySqlCdcStreamOperator(task_id="stream", seed_path=f"{state}/seed.json", sink_root=sink_root,
                                    checkpoint=f"{state}/checkpoint", mode=stream_mode,
                                    mysqlcdc_conn_id=mysqlcdc_conn_id, spark_master=spark_master, changelog=changelog)
    collect >> stream
    return {"plans": plans, "snapshots": snapshots, "collect": collect, "stream": stream}
