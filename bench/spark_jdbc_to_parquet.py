"""Baseline: what a Spark user would do instead, a partitioned JDBC read written to Parquet (no consistency).

    spark-submit --jars /usr/share/java/mariadb-java-client.jar bench/spark_jdbc_to_parquet.py URL TABLE OUT N
Credentials come from MYSQLCDC_SOURCE_FILE (not argv). Prints its row count and work time after Spark start-up as
the last stdout line (JSON).
"""

import json
import os
import sys
import time

from pyspark.sql import SparkSession

url, table, out, partitions = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
secrets = json.load(open(os.environ["MYSQLCDC_SOURCE_FILE"]))
spark = SparkSession.builder.appName("jdbc-to-parquet baseline").getOrCreate()
started = time.monotonic()
bounds = (spark.read.format("jdbc").option("url", url).option("driver", "org.mariadb.jdbc.Driver")
          .option("user", secrets["user"]).option("password", secrets["password"])
          .option("query", f"SELECT MIN(c_customer_sk) lo, MAX(c_customer_sk) hi FROM {table}").load().first())
df = (spark.read.format("jdbc").option("url", url).option("driver", "org.mariadb.jdbc.Driver")
      .option("user", secrets["user"]).option("password", secrets["password"]).option("dbtable", table)
      .option("partitionColumn", "c_customer_sk").option("lowerBound", bounds.lo).option("upperBound", bounds.hi + 1)
      .option("numPartitions", partitions).option("fetchsize", 10000).load())
df.write.mode("overwrite").parquet(out)
rows = spark.read.parquet(out).count()
print(json.dumps({"rows": rows, "seconds": time.monotonic() - started}), flush=True)
spark.stop()
