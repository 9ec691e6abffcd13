"""Example: capture tables of one MySQL/MariaDB source into Delta (or Iceberg) tables, then stream the binlog.

Settings come from the environment so that the demo and the tests can point it anywhere:
MYSQLCDC_EXAMPLE_TABLES (comma-separated db.table, or patterns such as db.order_\\d+; backticks around names with dots or commas), MYSQLCDC_SINK_ROOT, MYSQLCDC_STATE_DIR,
MYSQLCDC_SPLIT_ROWS, MYSQLCDC_CHUNK_ROWS, MYSQLCDC_SPARK_CONN_ID (an Airflow ``spark`` connection, or a
``spark_connect`` one to a Spark Connect server; unset: Spark local mode), MYSQLCDC_STREAM_SPARK_CONN_ID
(the stream's, when it differs), MYSQLCDC_SPARK_CONF (JSON, e.g. '{"spark.executor.memory": "4g"}') and
MYSQLCDC_STREAM_DEFERRABLE ("true": a continuous stream runs detached, watched from the triggerer)
and MYSQLCDC_AWS_CONN_ID (an Airflow ``aws`` connection for a lake and state on ``s3://``), and
MYSQLCDC_COLUMNS (JSON: per table, the columns kept and masked, e.g.
'{"shop.customers": {"exclude": ["notes"], "hash": ["email"]}}'; ``hash`` needs the connection's
``mask_salt`` extra), MYSQLCDC_ROW_FILTERS (JSON: per table, a predicate its rows must satisfy) and
MYSQLCDC_SNAPSHOT_CONSISTENCY (at-least-once: chunks read without their binlog windows),
MYSQLCDC_SINK_FORMAT (iceberg: Iceberg tables instead of Delta ones) and MYSQLCDC_ICEBERG_CATALOG_CONN_ID
(a connection whose extras are the Iceberg catalog's properties; unset: the embedded SQLite catalog).
The source is the Airflow connection ``mysqlcdc_default``.
Everything else is a DAG param, e.g. more tables, or a re-snapshot while streaming:

    airflow dags trigger mysqlcdc_example --conf '{"tables": ["shop.customers"]}'
    airflow dags trigger mysqlcdc_example --conf '{"resnapshot": ["shop.orders"]}'
"""

from __future__ import annotations

import json
import os

from airflow.sdk import DAG

from airflow_provider_mysqlcdc.cdc.source.selection import split_entries
from airflow_provider_mysqlcdc.pipeline import mysqlcdc_params, mysqlcdc_pipeline

SPLIT_ROWS = int(os.environ.get("MYSQLCDC_SPLIT_ROWS", "250000"))
CHUNK_ROWS = int(os.environ.get("MYSQLCDC_CHUNK_ROWS", "2000000"))
SINK_ROOT = os.environ.get("MYSQLCDC_SINK_ROOT", "/tmp/mysqlcdc/lake")

with DAG(
    dag_id="mysqlcdc_example", schedule=None, catchup=False, max_active_runs=1, tags=["mysqlcdc"],
    params=mysqlcdc_params(sink_root=SINK_ROOT, split_rows=SPLIT_ROWS, chunk_rows=CHUNK_ROWS),
) as dag:
    mysqlcdc_pipeline(
        tables=split_entries(os.environ.get("MYSQLCDC_EXAMPLE_TABLES", "shop.orders")),  # names or patterns
        sink_root=SINK_ROOT,
        state_dir=os.environ.get("MYSQLCDC_STATE_DIR", "/tmp/mysqlcdc/state"),
        split_rows=SPLIT_ROWS,
        chunk_rows=CHUNK_ROWS,
        spark_conn_id=os.environ.get("MYSQLCDC_SPARK_CONN_ID") or None,
        stream_spark_conn_id=os.environ.get("MYSQLCDC_STREAM_SPARK_CONN_ID") or None,
        spark_conf=json.loads(os.environ.get("MYSQLCDC_SPARK_CONF") or "{}"),
        tables_param=True,
        stream_deferrable=os.environ.get("MYSQLCDC_STREAM_DEFERRABLE", "").lower() == "true" or None,
        aws_conn_id=os.environ.get("MYSQLCDC_AWS_CONN_ID") or None,
        columns=json.loads(os.environ.get("MYSQLCDC_COLUMNS") or "null"),
        row_filters=json.loads(os.environ.get("MYSQLCDC_ROW_FILTERS") or "null"),
        route=json.loads(os.environ.get("MYSQLCDC_ROUTE") or "null"),
        snapshot_consistency=os.environ.get("MYSQLCDC_SNAPSHOT_CONSISTENCY") or "exactly-once",
        sink_format=os.environ.get("MYSQLCDC_SINK_FORMAT") or "delta",
        iceberg_catalog_conn_id=os.environ.get("MYSQLCDC_ICEBERG_CATALOG_CONN_ID") or None,
    )
