"""Staged snapshot rows: one Parquet file per split, written by a chunk job, applied by the stream."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_mysqlcdc.state.storage import file_system


def write_staged(url: str, data: pa.Table) -> None:
    fs, path = file_system(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "wb") as f:
        pq.write_table(data, f)


def read_staged(url: str) -> pa.Table:
    fs, path = file_system(url)
    with fs.open(path, "rb") as f:
        return pq.read_table(f)


def delete_staged(url: str) -> None:
    """Delete a staged file and its chunk folder once empty (already gone is fine: an interrupted
    release is simply done again)."""
    fs, path = file_system(url)
    if fs.exists(path):
        fs.rm(path)
    folder = path.rsplit("/", 1)[0]
    try:
        if fs.isdir(folder) and not fs.ls(folder, detail=False):
            fs.rmdir(folder)
    except OSError:  # object stores have no folders to remove, or another file arrived meanwhile
        pass
