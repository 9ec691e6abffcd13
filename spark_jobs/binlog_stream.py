"""spark-submit entry point for running from a checkout. The program itself ships inside the
package (``airflow_provider_mysqlcdc/spark/jobs/binlog_stream.py``), which is what the provider submits; both
run its ``main``:

    spark-submit --py-files airflow_provider_mysqlcdc.zip spark_jobs/binlog_stream.py --job JOB_FILE
"""

import sys

from airflow_provider_mysqlcdc.spark.jobs.binlog_stream import main

if __name__ == "__main__":
    sys.exit(main())
