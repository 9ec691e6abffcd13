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

import os
import sys
from pathlib import Path


def prepare(job_json: str, source=None, server_file=None):
    """The program's name and work; ``source`` given: a Spark Connect session, whose server-side parts
    read the password (and the object store's credentials) from ``server_file``, a private file on
    the server; else the settings come from the private file ``MYSQLCDC_SOURCE_FILE``, which the
    executors read too."""
    from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
    from airflow_provider_mysqlcdc.cdc.source.connection import ENV_PREFIX, SourceConfig
    from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
    from airflow_provider_mysqlcdc.spark.stream_job import run_stream_job

    job = StreamJob.from_json(job_json)
    if source is None:
        server_file = os.environ.get(f"{ENV_PREFIX}FILE")
        if not server_file:
            raise ConfigurationError(f"{ENV_PREFIX}FILE must name the private credentials file (executors read it too)")
        source = SourceConfig.from_private_file(Path(server_file))
    return "mysqlcdc-stream", lambda spark: run_stream_job(spark, source, job, source_file=server_file)


if __name__ == "__main__":
    from airflow_provider_mysqlcdc.spark.entrypoint import job_main

    sys.exit(job_main(None, description="MySQL CDC binlog stream", prepare=prepare))
