"""Example: the example pipeline's sink tables maintained on a schedule of their own.

Every day (MYSQLCDC_MAINTENANCE_SCHEDULE) the tables of the pipeline in mysqlcdc_example.py are
compacted in chunk-key order, checkpointed, and vacuumed of the files that left them more than
MYSQLCDC_VACUUM_RETENTION_HOURS ago (default 168, Delta's own default; time travel within it keeps
working). Iceberg tables are compacted, and their
snapshots older than the retention expired and their unreferenced files deleted. Which sink that is
(its root, format, namespace and catalog) the pipeline's state location says: its first run recorded it. A stream running
meanwhile does the work between two of its micro-batches, at the task's request
(operators/maintenance.py).
"""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_provider_mysqlcdc.operators.maintenance import MySqlCdcMaintenanceOperator

#: the example pipeline's state location (mysqlcdc_example.py: <state_dir>/<dag_id>)
PIPELINE_STATE = f"{os.environ.get('MYSQLCDC_STATE_DIR', '/tmp/mysqlcdc/state').rstrip('/')}/mysqlcdc_example"

with DAG(dag_id="mysqlcdc_maintenance_example", schedule=os.environ.get("MYSQLCDC_MAINTENANCE_SCHEDULE", "@daily"),
         catchup=False, tags=["mysqlcdc"]):
    # the sink (its root, format, namespace and catalog) is the one the pipeline's first run recorded
    MySqlCdcMaintenanceOperator(task_id="maintain", state_location=PIPELINE_STATE,
                                vacuum_retention_hours=float(os.environ.get("MYSQLCDC_VACUUM_RETENTION_HOURS", "168")),
                                poll_interval_s=1.0, aws_conn_id=os.environ.get("MYSQLCDC_AWS_CONN_ID") or None)
