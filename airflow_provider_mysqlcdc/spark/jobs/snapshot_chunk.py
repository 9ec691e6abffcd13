"""spark-submit program: read snapshot splits of one table in parallel and write them to the sink.

    spark-submit --py-files airflow_provider_mysqlcdc.zip airflow_provider_mysqlcdc/spark/jobs/snapshot_chunk.py \
        --report-to FOLDER [--job job.json] [--source-file FILE]

The job file (``ChunkJob``) names the table, the splits and the sink; it holds no secret. The source
credentials come from ``--source-file`` or the environment: ``MYSQLCDC_SOURCE_FILE`` (a private JSON
file) or ``MYSQLCDC_SOURCE_HOST/PORT/USER/PASSWORD``. The result (finished splits with their high
watermarks, rows, binlog changes merged, seconds) goes to the report folder (spark/entrypoint.py).
"""

from __future__ import annotations

import sys

from airflow_provider_mysqlcdc.spark.chunk_job import main, prepare

__all__ = ["main", "prepare"]  # prepare: the work a Spark Connect session runs (launch/connect_runner.py)

if __name__ == "__main__":
    sys.exit(main())
