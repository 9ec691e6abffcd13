"""A data file (sinks/data_files.py) in a Delta table's log: the ``add`` action committing it, as delta-rs
takes it and as the log's JSON holds it (sinks/delta/log.py)."""

from __future__ import annotations

from deltalake.transaction import AddAction

from airflow_provider_mysqlcdc.sinks.data_files import DataFile


def add_action(data_file: DataFile, *, data_change: bool = True) -> AddAction:
    """The Delta ``add`` action committing ``data_file`` (``data_change=False``: a rewrite of rows the
    table holds already, as a compaction's)."""
    return AddAction(data_file.path, data_file.size, {}, data_file.modified_ms, data_change, data_file.stats)


def add_json(data_file: DataFile, *, data_change: bool = True) -> dict:
    """The same ``add`` action as the log's JSON holds it."""
    return {"add": {"path": data_file.path, "size": data_file.size, "partitionValues": {},
                    "modificationTime": data_file.modified_ms, "dataChange": data_change, "stats": data_file.stats}}
