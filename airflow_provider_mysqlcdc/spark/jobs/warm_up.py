"""spark-submit program: start a Spark session, run a small query and stop, touching no source and
no sink: what the driver JVM's class-data archive is recorded from (launch/class_archive.py).

    spark-submit --conf spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit=ARCHIVE \
        airflow_provider_mysqlcdc/spark/jobs/warm_up.py
"""

from __future__ import annotations

import sys


def main() -> int:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("mysqlcdc-warm-up").getOrCreate()
    try:
        spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
