"""Staged snapshot rows: one Parquet file per split, written by a chunk job, applied by the stream."""

from __future__ import annotations

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq


def write_staged(url: str, data: pa.Table) -> None:
    fs, path = fsspec.core.url_to_fs(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "wb") as f:
        pq.write_table(data, f)


def read_staged(url: str) -> pa.Table:
    fs, path = fsspec.core.url_to_fs(url)
    with fs.open(path, "rb") as f:
        return pq.read_table(f)
