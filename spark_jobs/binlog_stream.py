"""spark-submit entry point for running from a checkout. The program itself ships inside the
package (``airflow_provider_mysqlcdc/spark/jobs/binlog_stream.py``), which is what the provider submits:

    spark-submit --py-files airflow_provider_mysqlcdc.zip spark_jobs/binlog_stream.py --job JOB_FILE
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("airflow_provider_mysqlcdc.spark.jobs.binlog_stream", run_name="__main__", alter_sys=True)
