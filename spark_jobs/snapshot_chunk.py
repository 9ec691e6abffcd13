"""spark-submit program: read snapshot splits of one table in parallel and write them to the sink.

    spark-submit --py-files airflow_provider_mysqlcdc.zip spark_jobs/snapshot_chunk.py \
        --job job.json [--result result.json]

The job file (``ChunkJob``) names the table, the splits and the sink; it holds no secret. The source
credentials come from the environment: ``MYSQLCDC_SOURCE_FILE`` (a private JSON file) or
``MYSQLCDC_SOURCE_HOST/PORT/USER/PASSWORD``. The result (finished splits with their high
watermarks, rows, binlog changes merged, seconds) goes to ``--result`` and to stdout.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="MySQL CDC chunk job")
    parser.add_argument("--job", required=True, help="path of the ChunkJob JSON file")
    parser.add_argument("--result", help="where to write the JSON result")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
                        force=True)

    from pyspark.sql import SparkSession

    from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
    from airflow_provider_mysqlcdc.spark.chunk_job import ChunkJob, run_chunk_job
    from airflow_provider_mysqlcdc.spark.results import publish_error, publish_result

    job = ChunkJob.from_json(Path(args.job).read_text())
    source = SourceConfig.from_env()
    spark = SparkSession.builder.appName(f"mysqlcdc-chunk {job.table}").getOrCreate()
    try:
        result = run_chunk_job(spark, source, job)
    except Exception as exc:
        publish_error(exc)
        raise
    finally:
        spark.stop()
    publish_result(result, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
