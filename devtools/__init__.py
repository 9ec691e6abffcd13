"""Development tools, used from a checkout and never installed with the provider: throwaway servers
(MariaDB, Spark standalone and Connect, an S3-compatible store, a StatsD listener, ``airflow
standalone``, headless Chromium), random write workloads, the torture run, the demo, the DAG
runner of the integration tests, and spark-submit as a plain child process.

``bin/demo``, ``bin/torture``, ``bench/`` and ``tests/`` import them from the checkout. Nothing in
``airflow_provider_mysqlcdc`` imports them (tests/integration/test_wheel_install.py checks the wheel).
"""
