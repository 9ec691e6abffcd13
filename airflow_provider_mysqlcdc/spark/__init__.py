"""Spark-side code: what the spark-submit programs in ``spark/jobs/`` run. Imports pyspark lazily."""
