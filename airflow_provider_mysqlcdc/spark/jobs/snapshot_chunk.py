"""spark-submit program: read snapshot splits of one table in parallel and write them to the sink.

    spark-submit --py-files airflow_provider_mysqlcdc.zip airflow_provider_mysqlcdc/spark/jobs/snapshot_chunk.py \
        --report-to FOLDER [--job job.json] [--source-file FILE]

The job file (``ChunkJob``) names the table, the splits and the sink; it holds no secret. The source
credentials come from ``--source-file`` or the environment: ``MYSQLCDC_SOURCE_FILE`` (a private JSON
file) or ``MYSQLCDC_SOURCE_HOST/PORT/USER/PASSWORD``. The result (finished splits with their high
watermarks, rows, binlog changes merged, seconds) goes to the report folder (spark/entrypoint.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.cdc.source.connection import ENV_PREFIX, SourceConfig
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob
from airflow_provider_mysqlcdc.spark.entrypoint import job_main

__all__ = ["main", "prepare"]  # prepare: the work a Spark Connect session runs (launch/connect_runner.py)


def prepare(job_json: str, source: SourceConfig | None = None,
            server_file: str | None = None) -> tuple[str, Callable[[Any], dict[str, Any]]]:
    """The program's name and work; ``source``: the source's settings when the caller has them (a
    Spark Connect session: launch/connect_runner.py, whose executors read the password from
    ``server_file`` on the server), else from the environment. The chunk job's code is imported by
    the work, while the SparkContext starts (spark/starting.py)."""
    job = ChunkJob.from_json(job_json)
    if source is None:
        source = SourceConfig.from_env()
        server_file = os.environ.get(f"{ENV_PREFIX}FILE")
    # executors read the password from a private file, so the function Spark ships them holds its path
    executors = source.for_executors(server_file) if server_file else source
    settings = source

    def work(spark: Any) -> dict[str, Any]:
        from airflow_provider_mysqlcdc.spark.chunk_job import run_chunk_job

        return run_chunk_job(spark.session(), settings, job, executors)

    return f"mysqlcdc-chunk {job.table}", work


def main(argv: list[str] | None = None) -> int:
    """The program: its arguments, session and report around ``prepare``'s work (spark/entrypoint.py)."""
    return job_main(argv, description="MySQL CDC chunk job", prepare=prepare)

if __name__ == "__main__":
    sys.exit(main())
