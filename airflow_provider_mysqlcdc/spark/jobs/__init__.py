"""The spark-submit programs the provider runs (found with ``importlib.resources``, so they ship in
the wheel): ``snapshot_chunk.py`` and ``binlog_stream.py``. Each is a script, not a module to import."""
