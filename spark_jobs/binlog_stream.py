"""spark-submit program: the binlog stream, merged into the sink with exactly-once micro-batches.

    spark-submit --py-files airflow_provider_mysqlcdc.zip spark_jobs/binlog_stream.py \
        --job stream.json [--result result.json]

The job file (``StreamJob``) names the seed (finished splits), the sink, the checkpoint location and
the mode (``available-now`` or ``continuous``). Credentials: ``MYSQLCDC_SOURCE_FILE``, a private file
that driver and executors read (never argv or Spark conf).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="MySQL CDC binlog stream")
    parser.add_argument("--job", required=True, help="path of the StreamJob JSON file")
    parser.add_argument("--result", help="where to write the JSON result (available-now mode)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
                        force=True)

    from pyspark.sql import SparkSession

    from airflow_provider_mysqlcdc.cdc.source.connection import ENV_PREFIX, SourceConfig
    from airflow_provider_mysqlcdc.spark.results import publish_error, publish_result
    from airflow_provider_mysqlcdc.spark.stream_job import StreamJob, run_stream_job

    job = StreamJob.from_json(Path(args.job).read_text())
    source_file = os.environ.get(f"{ENV_PREFIX}FILE")
    if not source_file:
        parser.error(f"{ENV_PREFIX}FILE must name the private credentials file (executors read it too)")
    source = SourceConfig.from_private_file(Path(source_file))
    spark = SparkSession.builder.appName("mysqlcdc-stream").getOrCreate()
    try:
        result = run_stream_job(spark, source, job, source_file)
    except Exception as exc:
        publish_error(exc)
        raise
    finally:
        spark.stop()
    publish_result(result, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
