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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import ENV_PREFIX, SourceConfig
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.spark.entrypoint import job_main

__all__ = ["main", "prepare"]  # prepare: the work a Spark Connect session runs (launch/connect_runner.py)


def prepare(job_json: str, source: SourceConfig | None = None,
            server_file: str | None = None) -> tuple[str, Callable[[Any], dict[str, Any]]]:
    """The program's name and work; ``source`` given: a Spark Connect session, whose server-side parts
    read the password (and the object store's credentials) from ``server_file``, a private file on
    the server; else the settings come from the private file ``MYSQLCDC_SOURCE_FILE``, which the
    executors read too. The stream's code is imported by the work, while the SparkContext starts
    (spark/starting.py)."""
    job = StreamJob.from_json(job_json)
    if source is None:
        server_file = os.environ.get(f"{ENV_PREFIX}FILE")
        if not server_file:
            raise ConfigurationError(f"{ENV_PREFIX}FILE must name the private credentials file (executors read it too)")
        source = SourceConfig.from_private_file(Path(server_file))
    settings = source

    def work(spark: Any) -> dict[str, Any]:
        from airflow_provider_mysqlcdc.spark.stream_job import run_stream_job

        return run_stream_job(spark, settings, job, source_file=server_file or "")

    return "mysqlcdc-stream", work


def main(argv: list[str] | None = None) -> int:
    """The program: its arguments, session and report around ``prepare``'s work (spark/entrypoint.py)."""
    return job_main(argv, description="MySQL CDC binlog stream", prepare=prepare)


if __name__ == "__main__":
    sys.exit(main())
