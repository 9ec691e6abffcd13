"""Iceberg position deletes (format v2): the files that mark rows of a data file deleted, and the
snapshot that adds and removes them with data files (sinks/iceberg/merge_on_read.py, and the
sink's other writes that must not leave one behind).

A position-delete file is a Parquet file of ``file_path`` and ``pos`` (Iceberg's reserved field ids
2147483546 and 2147483545), rows sorted by both, naming rows of data files by their position. The
sink writes one per data file it names (``write_position_deletes``), with that file's path as both
bounds of ``file_path``: readers then index it by that path and read it for no other file (what
Iceberg's Java writer calls file-scoped deletes). A data file has at most one such delete file the
sink wrote: a merge that deletes more of its rows writes one holding the old positions and the new,
and removes the old one in the same snapshot.

pyiceberg (0.12) reads delete files but has no snapshot that writes them: ``RowDelta`` is a subclass
of its fast-append producer (``_FastAppendFiles``, not public API: there is none for this) whose
snapshot also adds delete files, through a manifest of content ``deletes``, and removes files of
either kind by path, rewriting the manifests that list them. It does no validation of concurrent
commits of its own: the commit carries the catalog requirement that the branch is still at the
snapshot the transaction started from (``AssertRefSnapshotId``), so a concurrent commit fails it,
and it refuses pyiceberg's own retry, which would rebase deletes computed against the old snapshot
onto the new one: the caller redoes the whole operation from a fresh load.

A delete file whose data file left the table (dropped whole by a range's delete, or rewritten by
clustering) would stay in every later snapshot, read by nothing: ``drop_dangling_deletes`` removes
such files in the transaction that dropped their data file.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import TOTAL_DELETE_FILES, Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.typedef import EMPTY_DICT, Record
from pyiceberg.types import LongType, StringType

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Summary

#: Iceberg's reserved field ids of a position-delete file's columns
PATH_FIELD_ID, POS_FIELD_ID = 2147483546, 2147483545
DELETE_FILE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(PATH_FIELD_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_FIELD_ID).encode()}),
])
#: the summary key of a snapshot whose only work is removing dangling delete files
DANGLING_SUMMARY = "mysqlcdc.dropped-dangling-deletes"


def referenced_path(delete_file: DataFile) -> str | None:
    """The one data file a position-delete file names, when its ``file_path`` bounds say so (None:
    it may name several, as another engine's delete files may)."""
    low = (delete_file.lower_bounds or {}).get(PATH_FIELD_ID)
    high = (delete_file.upper_bounds or {}).get(PATH_FIELD_ID)
    return low.decode() if low is not None and low == high else None


def write_position_deletes(table: Table, data_path: str, positions: Iterable[int]) -> DataFile:
    """Write a position-delete file naming ``positions`` of the data file ``data_path`` into the
    table's ``data`` folder (not committed yet); its manifest entry, scoped to that file."""
    pos = np.unique(np.fromiter(positions, dtype=np.int64))
    rows = pa.Table.from_arrays([pa.array([data_path] * len(pos), pa.string()), pa.array(pos, pa.int64())],
                                schema=DELETE_FILE_SCHEMA)
    path = f"{table.location().rstrip('/')}/data/deletes-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(path).create(overwrite=False) as out:
        pq.write_table(rows, out, compression="snappy")
    path_bytes = to_bytes(StringType(), data_path)
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET,
        partition=Record(), record_count=len(pos), file_size_in_bytes=len(table.io.new_input(path)),
        column_sizes={}, value_counts={PATH_FIELD_ID: len(pos), POS_FIELD_ID: len(pos)},
        null_value_counts={PATH_FIELD_ID: 0, POS_FIELD_ID: 0}, nan_value_counts={},
        lower_bounds={PATH_FIELD_ID: path_bytes, POS_FIELD_ID: to_bytes(LongType(), int(pos[0]))},
        upper_bounds={PATH_FIELD_ID: path_bytes, POS_FIELD_ID: to_bytes(LongType(), int(pos[-1]))},
        key_metadata=None, split_offsets=None, equality_ids=None, sort_order_id=None,
        spec_id=table.metadata.default_spec_id)


def deleted_positions(io: FileIO, delete_files: Iterable[DataFile], data_path: str) -> np.ndarray:
    """The positions of the data file ``data_path`` that ``delete_files`` delete, sorted, once each."""
    found = [np.array([], dtype=np.int64)]
    for delete_file in delete_files:
        if delete_file.content != DataFileContent.POSITION_DELETES:
            raise ValueError(f"{delete_file.file_path}: equality deletes are not supported")
        scoped = referenced_path(delete_file)
        if scoped is not None and scoped != data_path:
            continue
        with io.new_input(delete_file.file_path).open() as handle:
            rows = pq.read_table(handle, columns=["file_path", "pos"])
        if scoped is None:
            rows = rows.filter(pc.equal(rows.column("file_path"), data_path))
        found.append(rows.column("pos").to_numpy().astype(np.int64))
    return np.unique(np.concatenate(found))


class MetadataOnce(Transaction):
    """pyiceberg's transaction, whose staged metadata (``table_metadata``) is computed once per staged
    update instead of at every read: pyiceberg deep-copies the table's whole metadata, every snapshot
    of its history, at each read, and one merge's snapshot reads it about sixteen times (measured: more
    than half of a 1,000-change merge into a table of 50 snapshots). The metadata is a frozen model,
    so the one copy can be shared."""

    @property
    def table_metadata(self) -> TableMetadata:
        staged = len(self._updates)
        held = getattr(self, "_metadata_at", None)
        if held is None or held[0] != staged:
            held = self._metadata_at = (staged, super().table_metadata)
        return held[1]


class _DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (pyiceberg writes data manifests only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(_FastAppendFiles):
    """One snapshot adding data files and position-delete files and removing files of either kind
    (by path) from the table: an ``overwrite`` (a ``delete`` when it adds no data), as Iceberg's
    row-level writers commit. Module doc: why a subclass, and why it never rebases."""

    def __init__(self, transaction: Transaction, io: FileIO, *, data_files: Sequence[DataFile] = (),
                 delete_files: Sequence[DataFile] = (), removed_data: Iterable[str] = (),
                 removed_deletes: Iterable[str] = (), summary: dict[str, str] = EMPTY_DICT) -> None:
        """:param removed_data: data files to remove, by path; ``removed_deletes``: delete files (only
            the manifests of the kinds that lose a file are read and written again)."""
        operation = Operation.OVERWRITE if data_files else Operation.DELETE
        super().__init__(operation, transaction, io, snapshot_properties=summary)
        self._added_data_files = list(data_files)
        self._added_delete_files = list(delete_files)
        self._removed = {*removed_data, *removed_deletes}
        self._kinds = ({ManifestContent.DATA} if removed_data else set()) | \
            ({ManifestContent.DELETES} if removed_deletes else set())

    def _existing_manifests(self) -> list[ManifestFile]:
        """The parent's manifests, each one listing a removed file written again with that file's
        entry marked deleted and the others existing (a manifest left with none dropped)."""
        if not self._removed:
            return super()._existing_manifests()
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id) \
            if self._parent_snapshot_id is not None else None
        kept: list[ManifestFile] = []
        found: set[str] = set()
        for manifest in parent.manifests(io=self._io) if parent is not None else []:
            entries = manifest.fetch_manifest_entry(io=self._io, discard_deleted=True) \
                if manifest.content in self._kinds else []
            gone = [e for e in entries if e.data_file.file_path in self._removed]
            if not gone:
                if manifest.has_added_files() or manifest.has_existing_files():
                    kept.append(manifest)
                continue
            with self._writer(manifest.content, self.spec(manifest.partition_spec_id)) as writer:
                for entry in entries:
                    if entry.data_file.file_path in self._removed:
                        writer.delete(entry)
                    else:
                        writer.existing(entry)
            kept.append(writer.to_manifest_file())
            found.update(e.data_file.file_path for e in gone)
            self._deleted_data_files.update(e.data_file for e in gone)
        if found != self._removed:
            raise CommitFailedException(f"files to remove are not in the table any more: {sorted(self._removed - found)}")
        return kept

    def _manifests(self) -> list[ManifestFile]:
        manifests = super()._manifests()
        if self._added_delete_files:
            with self._writer(ManifestContent.DELETES, self._transaction.table_metadata.spec()) as writer:
                for delete_file in self._added_delete_files:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                       sequence_number=None, file_sequence_number=None,
                                                       data_file=delete_file))
            manifests.append(writer.to_manifest_file())
        return manifests

    def _writer(self, content: ManifestContent, spec: PartitionSpec) -> ManifestWriter:
        if self._transaction.table_metadata.format_version != 2:
            raise ValueError("position deletes are written into format v2 tables only")
        kind = _DeleteManifestWriter if content == ManifestContent.DELETES else ManifestWriterV2
        return kind(spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        """pyiceberg's summary, counting the added delete files too (added-position-delete-files,
        added-position-deletes), as it counts the removed ones."""
        data_files = self._added_data_files
        self._added_data_files = [*data_files, *self._added_delete_files]
        try:
            return super()._summary(snapshot_properties)
        finally:
            self._added_data_files = data_files

    def _refresh_for_retry(self) -> None:
        """Refused: this snapshot's deletes name rows of the snapshot it was computed from."""
        raise CommitFailedException("a concurrent commit landed first: the row delta is computed again from a fresh load")


def live_files(metadata: TableMetadata, io: FileIO) -> tuple[set[str], list[DataFile]]:
    """The current snapshot's data file paths and its delete files."""
    snapshot = metadata.current_snapshot()
    data: set[str] = set()
    deletes: list[DataFile] = []
    for manifest in snapshot.manifests(io=io) if snapshot is not None else []:
        for entry in manifest.fetch_manifest_entry(io=io, discard_deleted=True):
            if entry.data_file.content == DataFileContent.DATA:
                data.add(entry.data_file.file_path)
            else:
                deletes.append(entry.data_file)
    return data, deletes


def has_deletes(metadata: TableMetadata) -> bool:
    """Whether the current snapshot may hold delete files: its summary counts some, or counts none
    (a snapshot another writer made without totals)."""
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return False
    total = snapshot.summary.additional_properties.get(TOTAL_DELETE_FILES) if snapshot.summary is not None else None
    return total is None or int(total) > 0


def drop_dangling_deletes(tx: Transaction, io: FileIO, summary: dict[str, str] | None = None) -> int:
    """Remove, in a snapshot of ``tx``, the delete files scoped to a data file the transaction's
    table (as staged so far) no longer holds; how many."""
    if not has_deletes(tx.table_metadata):
        return 0
    data, deletes = live_files(tx.table_metadata, io)
    dangling = {f.file_path for f in deletes if (path := referenced_path(f)) is not None and path not in data}
    if dangling:
        RowDelta(tx, io, removed_deletes=dangling, summary={**(summary or {}), DANGLING_SUMMARY: str(len(dangling))}).commit()
    return len(dangling)
