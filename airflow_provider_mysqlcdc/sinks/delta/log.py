"""A Delta table's log as the merge-on-read writer needs it: the live data files with their deletion
vectors, and commits written straight into the log.

delta-rs reads deletion vectors and keeps them through its own writes, but neither lists a file's
descriptor nor commits one (its ``AddAction`` has no such field). So this module replays the log
itself (the last checkpoint, then the commits after it), kept per table and brought up to date
commit by commit, and writes a commit as the protocol says: the next version's JSON file, created
only if no other writer created it first (put-if-absent), which is the same atomic step delta-rs
takes. A writer that loses the race deletes what it wrote and plans again (``ConcurrentCommit``).

Every replay is checked against delta-rs's own list of the version's files: a difference stops the
write (an ``InternalError``) instead of committing vectors against files the table does not hold.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import urllib.parse
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from fsspec.implementations.local import LocalFileSystem

from airflow_provider_mysqlcdc.cdc.errors import ConcurrentCommit, InternalError
from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN
from airflow_provider_mysqlcdc.sinks.data_files import open_data_file, put_if_absent
from airflow_provider_mysqlcdc.sinks.delta.deletion_vectors import DeletionVector

#: the writer features a commit of this module keeps right (any other: delta-rs writes the table)
WRITABLE_FEATURES = frozenset({"deletionVectors", "timestampNtz", "appendOnly", "invariants", "variantType"})
#: the protocol's default checkpoint interval (``delta.checkpointInterval``)
CHECKPOINT_INTERVAL = 100
ENGINE = "airflow-provider-mysqlcdc"


@dataclass(frozen=True)
class LiveFile:
    """A data file in the table at some version: its ``add`` action as the log holds it."""

    action: Mapping[str, Any]

    @property
    def path(self) -> str:
        """As the log names it (relative to the table, URL-encoded)."""
        return str(self.action["path"])

    @property
    def relative_path(self) -> str:
        """As the file system names it, relative to the table's folder."""
        return urllib.parse.unquote(self.path)

    @property
    def vector(self) -> DeletionVector | None:
        found = self.action.get("deletionVector")
        return None if not found else DeletionVector.from_json(found)

    @property
    def deleted(self) -> int:
        vector = self.vector
        return 0 if vector is None else vector.cardinality

    @functools.cached_property
    def stats(self) -> dict[str, Any]:
        """The file's statistics, parsed once (a replay keeps its files from batch to batch)."""
        text = self.action.get("stats")
        return json.loads(text) if text else {}

    @property
    def rows(self) -> int | None:
        """The file's physical rows (its deleted ones included), when its statistics say."""
        found = self.stats.get("numRecords")
        return None if found is None else int(found)

    @property
    def chunk_bounds(self) -> tuple[str | None, str | None]:
        stats = self.stats
        return stats.get("minValues", {}).get(CHUNK_COLUMN), stats.get("maxValues", {}).get(CHUNK_COLUMN)

    def read(self, uri: str, columns: Sequence[str] | None = None) -> pa.Table:
        """The file's physical rows (its deleted ones included) of ``columns`` it has (None: all), in
        the table at ``uri``."""
        with open_data_file(uri, self.relative_path) as handle:
            parquet = pq.ParquetFile(handle)
            names = None if columns is None else [c for c in columns if c in parquet.schema_arrow.names]
            return parquet.read(columns=names)

    def with_vector(self, vector: DeletionVector, now_ms: int) -> dict[str, Any]:
        """The ``add`` action of this file under ``vector``: its statistics no longer tight (they
        describe rows the vector deletes too)."""
        stats = {**self.stats, "tightBounds": False}
        return {"add": {**self.action, "modificationTime": int(self.action.get("modificationTime", now_ms)),
                        "dataChange": True, "stats": json.dumps(stats), "deletionVector": vector.to_json()}}

    def removal(self, now_ms: int, *, data_change: bool = True) -> dict[str, Any]:
        """The ``remove`` action of this file, its vector's descriptor included (a reader keys the
        table's files by path and vector)."""
        action: dict[str, Any] = {"path": self.path, "deletionTimestamp": now_ms, "dataChange": data_change,
                                  "extendedFileMetadata": True, "partitionValues": self.action.get("partitionValues") or {},
                                  "size": int(self.action["size"])}
        if self.action.get("deletionVector"):
            action["deletionVector"] = self.action["deletionVector"]
        return {"remove": action}


@dataclass
class _Replay:
    version: int
    files: dict[str, LiveFile] = field(default_factory=dict)
    checked_at: int = -1  # the version at which the files were last checked against delta-rs's list


#: the live files a log's replay holds are checked against delta-rs's list of them at least this often (versions)
CROSS_CHECK_EVERY = 100


class DeltaLog:
    """The log of the Delta table at ``uri`` (the sink's form of its location), replayed on demand."""

    def __init__(self, uri: str):
        self.uri = uri.rstrip("/")
        self.fs, root = fsspec.core.url_to_fs(self.uri)
        self._local = isinstance(self.fs, LocalFileSystem)
        self._folder = f"{root.rstrip('/')}/_delta_log"
        self._replay: _Replay | None = None
        self._table: DeltaTable | None = None
        self._lock = threading.Lock()

    def latest(self, storage_options: dict[str, str] | None) -> DeltaTable:
        """The table as committed last: loaded once, then brought up to date by the commits since
        (delta-rs's ``update_incremental``), which costs what they hold rather than a load of the whole
        log (a merge-on-read batch needs it twice). Loaded afresh when that fails. On a local disk, a
        table no commit followed (its next version's file absent: versions are consecutive) is taken
        as it is: ``update_incremental`` lists the whole log folder, a stream's batch into ten tables
        did it twenty times (an object store's listing cache could hide a new file: there delta-rs looks)."""
        with self._lock:
            if self._table is not None:
                if self._local and not self.fs.exists(self._commit_file(self._table.version() + 1)):
                    return self._table
                try:
                    self._table.update_incremental()
                    return self._table
                except Exception:  # noqa: BLE001 - e.g. the table's folder replaced: a load from scratch
                    self._table = None
            self._table = DeltaTable(self.uri, storage_options=storage_options)
            return self._table

    def files(self, table: DeltaTable) -> dict[str, LiveFile]:
        """The live files of ``table`` (as loaded) by path, checked against delta-rs's list of them when
        the replay starts from a checkpoint and every ``CROSS_CHECK_EVERY`` versions after (the check
        reads every file's add action: at every batch, it cost what the table holds)."""
        version = table.version()
        with self._lock:
            replay = self._replay
            fresh = replay is None or replay.version > version
            if replay is None or fresh:
                replay = self._from_checkpoint(version)
            checked = replay.checked_at
            for number in range(replay.version + 1, version + 1):
                _apply(replay.files, self._commit_actions(number))
                replay.version = number
            if fresh or version - checked >= CROSS_CHECK_EVERY:
                replay.checked_at = version
            self._replay = replay
            files = dict(replay.files)
        if replay.checked_at != version:
            return files
        listed = set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())
        replayed = {f.relative_path for f in files.values()}
        if listed != replayed and {urllib.parse.unquote(p) for p in listed} != replayed:
            self._replay = None
            raise InternalError(f"{self.uri} at version {version}: the log's replay holds {len(replayed)} files, "
                              f"delta-rs lists {len(listed)} (e.g. {sorted(listed ^ replayed)[:3]})")
        return files

    def commit(self, read_version: int, actions: Iterable[Mapping[str, Any]], *, operation: str,
               parameters: Mapping[str, Any] | None = None, info: Mapping[str, Any] | None = None,
               rebase_over: Collection[str] | None = None) -> int:
        """Write ``actions`` as the version after ``read_version`` (the version they were planned on),
        atomically, with ``info`` in its ``commitInfo``; the version it landed as. Raises
        ``ConcurrentCommit`` when another writer took that version, unless ``rebase_over`` names the
        paths (as the log names them) the commit removes: then it lands at the next free version when
        no commit since ``read_version`` removed one of them or changed the table's schema or protocol,
        as delta-rs lets a compaction or a range commit land beside another writer's appends."""
        commit_info = {"timestamp": int(time.time() * 1000), "operation": operation,
                       "operationParameters": {k: str(v) for k, v in (parameters or {}).items()},
                       "readVersion": read_version, "isolationLevel": "Serializable", "isBlindAppend": False,
                       "engineInfo": ENGINE, "clientVersion": ENGINE, **(info or {})}
        lines = [json.dumps({"commitInfo": commit_info})] + [json.dumps(a, separators=(",", ":")) for a in actions]
        data = ("\n".join(lines) + "\n").encode()
        version = read_version + 1
        while not put_if_absent(self.fs, self._commit_file(version), data):
            clash = None if rebase_over is None else _clash(self._commit_actions(version), rebase_over)
            if rebase_over is None or clash:
                raise ConcurrentCommit(f"version {version} of {self.uri} was committed by another writer"
                                       + (f" ({clash})" if clash else ""))
            version += 1
        return version

    def unreferenced(self, table: DeltaTable, before_ms: int) -> tuple[list[str], list[str]]:
        """What vacuum may delete from the table's folder, as of ``table``'s version (as loaded): the
        data files and deletion vector files (paths relative to the folder; a vector at an absolute
        path is left alone) no version since ``before_ms``
        names. A file is named by the version's live files, or by a removal since then: its tombstones
        are those of the last checkpoint and of the commits after it, and a data file re-added under a
        new vector has several, of which the latest counts (delta-rs's vacuum takes any expired one,
        and deletes a file a version within the retention still reads). A file no tombstone names (a
        data file a commit never added) is never listed here."""
        version = table.version()
        live = self.files(table)
        latest: dict[str, int] = {}
        vectors: dict[str, int] = {}
        for removed in self._tombstones(version):
            at = int(removed.get("deletionTimestamp") or 0)
            path = urllib.parse.unquote(str(removed["path"]))
            latest[path] = max(at, latest.get(path, at))
            file = DeletionVector.from_json(removed["deletionVector"]).relative_path \
                if removed.get("deletionVector") else None
            if file is not None:
                vectors[file] = max(at, vectors.get(file, at))
        named = {f.relative_path for f in live.values()}
        named_vectors = {f.vector.relative_path for f in live.values() if f.vector is not None}
        return ([p for p, at in latest.items() if p not in named and at < before_ms],
                [v for v, at in vectors.items() if v not in named_vectors and at < before_ms])

    def named(self, table: DeltaTable) -> set[str]:
        """Every file (relative to the table's folder) that ``table``'s version (as loaded) or a removal
        the log still holds names: live data files and their vectors, removed ones and theirs. A file
        in the folder outside it was never committed, or left the table so long ago that its removal
        left the log."""
        live = self.files(table).values()
        named = {f.relative_path for f in live}
        vectors = [f.vector for f in live if f.vector is not None]
        for removed in self._tombstones(table.version()):
            named.add(urllib.parse.unquote(str(removed["path"])))
            if removed.get("deletionVector"):
                vectors.append(DeletionVector.from_json(removed["deletionVector"]))
        return named | {v.relative_path for v in vectors if v.relative_path is not None}

    def _tombstones(self, version: int) -> list[Mapping[str, Any]]:
        checkpoint = self._checkpoint_at_most(version)
        removes: list[Mapping[str, Any]] = []
        if checkpoint is not None:
            for part in checkpoint[1]:
                with self.fs.open(part, "rb") as handle:
                    removes += [r for r in pq.read_table(handle, columns=["remove"]).column("remove").to_pylist() if r]
        for number in range((checkpoint[0] if checkpoint else -1) + 1, version + 1):
            removes += [a["remove"] for a in self._commit_actions(number) if "remove" in a]
        return removes

    def set_properties(self, table: DeltaTable, properties: Mapping[str, str], *, operation: str = "SET TBLPROPERTIES") -> int:
        """Set table properties in a commit of its own (a ``metaData`` action of the table's metadata as
        loaded, its configuration updated). delta-rs's ``set_table_properties`` on a table of writer
        version 7 also lists the reader feature ``variantType``, which readers without it refuse."""
        metadata = table.metadata()
        action = {"id": metadata.id, "name": metadata.name, "description": metadata.description,
                  "format": {"provider": "parquet", "options": {}}, "schemaString": table.schema().to_json(),
                  "partitionColumns": list(metadata.partition_columns),
                  "configuration": {**metadata.configuration, **properties}, "createdTime": metadata.created_time}
        return self.commit(table.version(), [{"metaData": {k: v for k, v in action.items() if v is not None}}],
                           operation=operation, parameters={"properties": json.dumps(dict(properties))})

    # --- replay ----------------------------------------------------------------------------------
    def _commit_file(self, version: int) -> str:
        return f"{self._folder}/{version:020d}.json"

    def _commit_actions(self, version: int) -> list[dict[str, Any]]:
        with self.fs.open(self._commit_file(version), "rb") as handle:
            return [json.loads(line) for line in handle.read().decode().splitlines() if line.strip()]

    def _from_checkpoint(self, version: int) -> _Replay:
        """The files as of the latest checkpoint at or before ``version`` (none: version -1, empty)."""
        checkpoint = self._checkpoint_at_most(version)
        if checkpoint is None:
            return _Replay(-1)
        number, parts = checkpoint
        files: dict[str, LiveFile] = {}
        for part in parts:
            with self.fs.open(part, "rb") as handle:
                adds = pq.read_table(handle, columns=["add"]).column("add").to_pylist()
            for add in adds:
                if add is not None:
                    action = _json_form(add)
                    files[action["path"]] = LiveFile(action)
        return _Replay(number, files)

    def _checkpoint_at_most(self, version: int) -> tuple[int, list[str]] | None:
        names = [p.rsplit("/", 1)[-1] for p in self.fs.ls(self._folder, detail=False)]
        checkpoints: dict[int, list[str]] = {}
        for name in names:
            if ".checkpoint." in name and name.endswith(".parquet"):
                checkpoints.setdefault(int(name.split(".", 1)[0]), []).append(f"{self._folder}/{name}")
        usable = [n for n in checkpoints if n <= version]
        if not usable:
            return None
        number = max(usable)
        return number, sorted(checkpoints[number])


def _apply(files: dict[str, LiveFile], actions: list[dict[str, Any]]) -> None:
    """One commit's adds and removes (a remove first: a commit re-adds a file under a new vector)."""
    for action in actions:
        if "remove" in action:
            removed = action["remove"]
            held = files.get(removed["path"])
            if held is not None and _vector_id(held.action) == _vector_id(removed):
                del files[removed["path"]]
    for action in actions:
        if "add" in action:
            files[action["add"]["path"]] = LiveFile(action["add"])


def _clash(actions: list[dict[str, Any]], paths: Collection[str]) -> str | None:
    """What in another writer's commit keeps a commit removing ``paths`` from landing after it."""
    for action in actions:
        if "metaData" in action or "protocol" in action:
            return "it changed the table's schema or protocol"
        for kind in ("remove", "add"):
            if kind in action and action[kind]["path"] in paths:
                return f"it changed {action[kind]['path']}"
    return None


def _vector_id(action: Mapping[str, Any]) -> str | None:
    found = action.get("deletionVector")
    return None if not found else DeletionVector.from_json(found).unique_id


def _json_form(value: Any) -> Any:
    """A checkpoint's action (Parquet, read as Python) as the JSON log has it: maps as objects, no
    missing fields, no parsed statistics."""
    if isinstance(value, dict):
        return {k: _json_form(v) for k, v in value.items() if v is not None and k != "stats_parsed"}
    if isinstance(value, list) and all(isinstance(i, tuple) and len(i) == 2 for i in value):
        return {k: v for k, v in value}
    return value


def unkept_features(table: DeltaTable) -> str | None:
    """Why a commit of this module would not keep ``table`` right whatever it writes (None: it would):
    a writer feature it does not know, or column mapping (the data files' columns are then not the
    table's, also on a legacy protocol that lists no features)."""
    unknown = set(table.protocol().writer_features or ()) - WRITABLE_FEATURES
    if unknown:
        return f"writer feature(s) {', '.join(sorted(unknown))}"
    if str(table.metadata().configuration.get("delta.columnMapping.mode") or "none").lower() != "none":
        return "column mapping"
    return None


def is_writable(table: DeltaTable) -> str | None:
    """Why a merge of this module would not keep ``table`` right (None: it would): ``unkept_features``,
    CHECK constraints (which only delta-rs's writes check), or a change data feed."""
    why = unkept_features(table)
    if why:
        return why
    configuration = table.metadata().configuration
    if any(k.startswith("delta.constraints.") for k in configuration):
        return "CHECK constraints"
    if str(configuration.get("delta.enableChangeDataFeed", "false")).lower() == "true":
        return "a change data feed"
    return None


def checkpoint_due(table: DeltaTable, version: int) -> bool:
    """Whether ``version`` (a commit of this module) is one the table checkpoints at, as delta-rs does
    after its own commits."""
    interval = int(table.metadata().configuration.get("delta.checkpointInterval") or CHECKPOINT_INTERVAL)
    return version > 0 and version % interval == 0
