"""Spark-side code: what the spark-submit programs in ``spark_jobs/`` run. Imports pyspark lazily."""
