"""A data file (sinks/data_files.py) in a Delta table's log: the ``add`` action committing it."""

from __future__ import annotations

from deltalake.transaction import AddAction

from airflow_provider_mysqlcdc.sinks.data_files import DataFile


def add_action(data_file: DataFile, *, data_change: bool = True) -> AddAction:
    """The Delta ``add`` action committing ``data_file`` (``data_change=False``: a rewrite of rows the
    table holds already, as a compaction's)."""
    return AddAction(data_file.path, data_file.size, {}, data_file.modified_ms, data_change, data_file.stats)
