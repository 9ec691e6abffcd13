"""Example: capture tables of one MySQL/MariaDB source into Delta tables, then stream the binlog.

Settings come from the environment so that the demo and the tests can point it anywhere:
MYSQLCDC_EXAMPLE_TABLES (comma-separated db.table), MYSQLCDC_SINK_ROOT, MYSQLCDC_STATE_DIR,
MYSQLCDC_SPLIT_ROWS, MYSQLCDC_CHUNK_ROWS. The source is the Airflow connection ``mysqlcdc_default``.
More tables can be given when triggering, through the ``tables`` param:

    airflow dags trigger mysqlcdc_example --conf '{"tables": ["shop.customers"]}'
"""

from __future__ import annotations

import os

from airflow.sdk import DAG, Param

from airflow_provider_mysqlcdc.pipeline import mysqlcdc_pipeline

SPLIT_ROWS = int(os.environ.get("MYSQLCDC_SPLIT_ROWS", "250000"))
CHUNK_ROWS = int(os.environ.get("MYSQLCDC_CHUNK_ROWS", "2000000"))

with DAG(
    dag_id="mysqlcdc_example", schedule=None, catchup=False, max_active_runs=1, tags=["mysqlcdc"],
    params={
        "tables": Param([], type="array", items={"type": "string"}, description="more tables to capture, db.table"),
        "split_rows": Param(SPLIT_ROWS, type="integer", minimum=1, description="rows per split"),
        "chunk_rows": Param(CHUNK_ROWS, type="integer", minimum=1, description="rows per spark-submit chunk"),
    },
) as dag:
    mysqlcdc_pipeline(
        tables=[t for t in os.environ.get("MYSQLCDC_EXAMPLE_TABLES", "shop.orders").split(",") if t],
        sink_root=os.environ.get("MYSQLCDC_SINK_ROOT", "/tmp/mysqlcdc/lake"),
        state_dir=os.environ.get("MYSQLCDC_STATE_DIR", "/tmp/mysqlcdc/state"),
        split_rows=SPLIT_ROWS,
        chunk_rows=CHUNK_ROWS,
        tables_param=True,
    )
