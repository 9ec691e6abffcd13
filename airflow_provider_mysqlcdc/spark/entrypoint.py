"""What every program in ``spark/jobs/`` does around its work: arguments, logging, the Spark
session, and publishing the result or the error (spark/results.py)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: prepare(job file) -> (Spark application name, work(spark) -> result)
Prepare = Callable[[Path], tuple[str, Callable[[Any], dict[str, Any]]]]


def job_main(argv: list[str] | None, *, description: str, prepare: Prepare) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--job", required=True, help="path of the job's JSON file (it holds no secret)")
    parser.add_argument("--result", help="where to write the JSON result")
    args = parser.parse_args(argv)
    # force: pyspark may have configured logging already; the driver's stderr reaches the task log
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr, force=True)

    from pyspark.sql import SparkSession

    from airflow_provider_mysqlcdc.spark.results import publish_error, publish_result

    app_name, work = prepare(Path(args.job))
    spark = SparkSession.builder.appName(app_name).getOrCreate()
    try:
        result = work(spark)
    except Exception as exc:
        publish_error(exc)
        raise
    finally:
        spark.stop()
    publish_result(result, args.result)
    return 0
