"""Deletion vectors as the Delta protocol writes them (sinks/delta/deletion_vectors.py), read back by
our reader and by two readers we did not write: delta-rs and DuckDB's delta extension."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake
from pyroaring import BitMap64

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.maintenance import MaintenancePolicy
from airflow_provider_mysqlcdc.sinks.delta.deletion_vectors import (
    DeletionVector,
    read_vector,
    serialize,
    write_vectors,
    z85_decode,
    z85_encode,
)
from airflow_provider_mysqlcdc.sinks.delta.log import DeltaLog
from airflow_provider_mysqlcdc.sinks.delta.maintenance import maintain_table
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink
from devtools.verify import duckdb_with


def duckdb_rows(uri: str) -> list[dict]:
    """The table's rows as DuckDB's delta extension (from its PyPI wheel, no download) reads them."""
    con = duckdb_with("delta")
    try:
        return con.execute(f"SELECT * FROM delta_scan('{uri}')").to_arrow_table().to_pylist()
    finally:
        con.close()


def test_z85_is_zeromq_base85_as_its_specification_gives_it():
    assert z85_encode(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == "HelloWorld"
    assert z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])


def test_a_vector_file_reads_back_each_vector_it_holds_past_32_bit_positions_too(tmp_path):
    vectors = {"a.parquet": BitMap64([0, 3, 5]), "b.parquet": BitMap64([7, (1 << 32) + 1, (3 << 32) + 9])}
    name, descriptors = write_vectors(str(tmp_path), vectors)
    assert (tmp_path / name).exists()
    assert {p: read_vector(str(tmp_path), d) for p, d in descriptors.items()} == vectors
    assert descriptors["b.parquet"].cardinality == 3 and descriptors["b.parquet"].storage_type == "u"


def test_an_inline_vector_reads_back_its_positions():
    data = serialize(BitMap64([1, 2, 40]))
    padded = data + bytes(-len(data) % 4)
    vector = DeletionVector("i", z85_encode(padded), None, len(data), 3)
    assert read_vector("/nowhere", vector) == BitMap64([1, 2, 40])


def test_a_damaged_vector_file_is_refused_not_read(tmp_path):
    name, descriptors = write_vectors(str(tmp_path), {"a.parquet": BitMap64([1, 2])})
    content = bytearray((tmp_path / name).read_bytes())
    content[-6] ^= 0xFF  # a byte of the bitmap: its checksum no longer matches
    (tmp_path / name).write_bytes(bytes(content))
    with pytest.raises(ValueError, match="damaged"):
        read_vector(str(tmp_path), descriptors["a.parquet"])


def test_delta_rs_and_duckdb_leave_out_the_rows_a_committed_vector_deletes(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array(range(10), pa.int64())}))
    DeltaTable(uri).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    table = DeltaTable(uri)
    delta_log = DeltaLog(uri)
    (path, live), = delta_log.files(table).items()
    _, descriptors = write_vectors(uri, {path: BitMap64([2, 7])})
    delta_log.commit(table.version(), [live.removal(0), live.with_vector(descriptors[path], 0)], operation="DELETE")

    expected = [0, 1, 3, 4, 5, 6, 8, 9]
    assert sorted(pa.table(DeltaTable(uri).scan()).column("id").to_pylist()) == expected
    assert sorted(r["id"] for r in duckdb_rows(uri)) == expected
    assert sorted(pa.table(DeltaTable(uri, version=table.version()).scan()).column("id").to_pylist()) == list(range(10))


def test_a_vector_with_a_random_prefix_lives_in_that_folder_of_the_table():
    file_id = uuid.uuid4()
    vector = DeletionVector("u", "ab" + z85_encode(file_id.bytes), 1, 10, 2)
    assert vector.relative_path == f"ab/deletion_vector_{file_id}.bin"
    assert vector.file_path("/lake/t/") == f"/lake/t/ab/deletion_vector_{file_id}.bin"
    assert DeletionVector("p", "/elsewhere/v.bin", 1, 10, 2).relative_path is None


def test_vacuum_deletes_a_replaced_vector_in_a_prefix_folder_and_keeps_the_live_one(tmp_path):
    """Writers such as Spark put vector files in random prefix folders: vacuum finds them there."""
    sink = DeltaSink(str(tmp_path), merge_mode="merge-on-read")
    folder = tmp_path / "db" / "t"
    uri = sink.table_uri(TableId("db", "t"))
    write_deltalake(uri, pa.table({"id": pa.array(range(10), pa.int64())}))
    DeltaTable(uri).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    delta_log = DeltaLog(uri)
    prefixed = []
    for deleted in ([2], [2, 7]):
        table = DeltaTable(uri)
        (path, live), = delta_log.files(table).items()
        name, descriptors = write_vectors(uri, {path: BitMap64(deleted)})
        (folder / "ab").mkdir(exist_ok=True)
        (folder / name).rename(folder / "ab" / name)
        vector = dataclasses.replace(descriptors[path], path_or_inline="ab" + descriptors[path].path_or_inline)
        prefixed.append(folder / "ab" / name)
        now = int(time.time() * 1000)
        delta_log.commit(table.version(), [live.removal(now), live.with_vector(vector, now)], operation="DELETE")
    [done] = maintain_table(sink, TableId("db", "t"), MaintenancePolicy(compact=False, vacuum_retention_s=0))
    assert done.files_vacuumed == 1 and not prefixed[0].exists() and prefixed[1].exists()
    assert sorted(pa.table(DeltaTable(uri).scan()).column("id").to_pylist()) == [0, 1, 3, 4, 5, 6, 8, 9]
