"""airflow-provider-mysqlcdc: lock-free chunked MySQL CDC, orchestrated by Airflow, executed on Spark.

Layout:
  cdc/          the CDC core (no Airflow, no Spark): model, source access, planning, reading,
                binlog and record utilities. Spark executors import only this.

Test servers, workloads, the demo and the DAG runner live outside the package, in the checkout's
``devtools/``: they are never installed.
"""

__version__ = "0.1.0"
