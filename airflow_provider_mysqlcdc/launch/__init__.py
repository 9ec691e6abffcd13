"""What runs in the Airflow worker to start and watch the Spark programs: spark-submit
(``submit.py``), Spark Connect sessions (``connect_runner.py``), the worker's shared local Spark
Connect server (``local_server.py``, ``local_supervisor.py``, ``local_runner.py``), and a detached
stream's supervision (``supervision.py``). The programs themselves, and what runs in the Spark driver
and executors, are ``spark/``'s; the choice of runner is the Spark hook's (hooks/spark.py)."""
