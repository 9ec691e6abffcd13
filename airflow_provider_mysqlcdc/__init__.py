"""airflow-provider-mysqlcdc: lock-free chunked MySQL CDC, orchestrated by Airflow, executed on Spark.

Layout:
  cdc/          the CDC core (no Airflow, no Spark): model, source access, planning, reading,
                binlog and record utilities. Spark executors import only this.
  devtools/     throwaway MariaDB server, random workloads and the demo.
"""

__version__ = "0.1.0"
