"""spark-submit program: the binlog stream, merged into the sink with exactly-once micro-batches.

    spark-submit --py-files airflow_provider_mysqlcdc.zip airflow_provider_mysqlcdc/spark/jobs/binlog_stream.py \
        --report-to FOLDER [--job stream.json] [--source-file FILE]

The job file (``StreamJob``) names the seed (finished splits), the sink, the checkpoint location and
the mode (``available-now`` or ``continuous``). Credentials: ``MYSQLCDC_SOURCE_FILE``, a private file
that driver and executors read (never argv or Spark conf). On a Spark Connect session (``--spark-connect``,
or in an Airflow task's process: launch/connect_runner.py) the server's Python workers read a private
file of the server's own instead (spark/connect.py).
"""

from __future__ import annotations

import sys

from airflow_provider_mysqlcdc.spark.stream_job import main, prepare

__all__ = ["main", "prepare"]  # prepare: the work a Spark Connect session runs (launch/connect_runner.py)

if __name__ == "__main__":
    sys.exit(main())
