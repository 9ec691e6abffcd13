"""A PySpark streaming data source over the binlog (``spark.readStream.format("mysqlcdc_binlog")``).

Offsets are binlog positions ``{"file", "pos"}`` read from ``SHOW MASTER STATUS``, which always
points between transactions, so a micro-batch never ends inside a transaction. The source is seeded
with the finished splits (a JSON file written by the snapshot) and applies the finished-split filter
on the executors; it emits one row per run of up to 1,000 consecutive change records, pickled
together in ``payload`` (the only consumer is our Python ``foreachBatch``; pickling keeps every type
exact, and batching keeps Spark's per-row cost off the hot path). ``version`` (the first record's
offset as an int64) and ``row``/``part`` order the runs; ``count`` says how many records a run holds.

Options: ``seed`` (path of the seed file), ``source_file`` (path of the private credentials file;
never the password itself, since options show up in query plans), ``server_id_range`` ("a-b"),
``decode_pieces`` (how many tasks decode one large micro-batch range in parallel).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from airflow_provider_mysqlcdc.cdc.binlog.ranges import plan_decode_ranges
from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader, pick_server_id
from airflow_provider_mysqlcdc.cdc.binlog.split_filter import FinishedSplitFilter
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, SchemaChangeEvent
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import current_offset

SOURCE_NAME = "mysqlcdc_binlog"
SCHEMA = "version LONG, row INT, part INT, kind STRING, count INT, ts_ms LONG, payload BINARY"


@dataclass
class StreamSeed:
    """What the stream starts from: the finished splits of snapshotted tables, and/or tables streamed
    from ``start_offset`` without a snapshot (``chunk_keys`` names every captured table's chunk key)."""

    finished_splits: list[FinishedSplit]
    start_offset: BinlogOffset | None = None
    chunk_keys: dict[TableId, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in self.finished_splits:
            self.chunk_keys.setdefault(f.split.table_id, f.split.chunk_key)

    @classmethod
    def load(cls, path: str | Path) -> "StreamSeed":
        data = json.loads(Path(path).read_text())
        return cls([FinishedSplit.from_dict(d) for d in data["finished_splits"]],
                   BinlogOffset.from_dict(data["start_offset"]) if data.get("start_offset") else None,
                   {TableId.parse(t): k for t, k in data.get("chunk_keys", {}).items()})

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        data = {"finished_splits": [f.to_dict() for f in self.finished_splits],
                "start_offset": self.start_offset.to_dict() if self.start_offset else None,
                "chunk_keys": {f"`{t.database}`.`{t.table}`": k for t, k in self.chunk_keys.items()}}
        Path(path).write_text(json.dumps(data))

    @property
    def tables(self) -> list[TableId]:
        return sorted(self.chunk_keys)

    def initial_offset(self) -> BinlogOffset:
        if self.start_offset is not None:
            return self.start_offset
        return min(f.high_watermark for f in self.finished_splits)


def offset_dict(offset: BinlogOffset) -> dict[str, Any]:
    return {"file": offset.file, "pos": offset.position}


def offset_from_dict(data: dict[str, Any]) -> BinlogOffset:
    return BinlogOffset(str(data["file"]), int(data["pos"]))


class BinlogRange(InputPartition):
    """One piece of a micro-batch's binlog range (ranges.py), decoded by one executor task."""

    def __init__(self, read_from: dict[str, Any], decode_after: dict[str, Any] | None, end: dict[str, Any],
                 server_id: int):
        self.read_from, self.decode_after, self.end = read_from, decode_after, end
        self.server_id = server_id  # distinct per piece: the server drops a replica connection that reuses an id


class BinlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side plans ranges of the binlog; ``read`` runs on executors (on a pickled copy)."""

    def __init__(self, options: dict[str, str]):
        self.seed_path = options["seed"]
        self.source_file = options["source_file"]
        low, _, high = options.get("server_id_range", "5400-6399").partition("-")
        self.server_id_range = (int(low), int(high))
        self.decode_pieces = int(options.get("decode_pieces", "2"))
        self._target: dict[str, Any] | None = None

    def _source(self) -> SourceConfig:
        return SourceConfig.from_private_file(Path(self.source_file))

    def _head(self) -> dict[str, Any]:
        conn = self._source().connect()
        try:
            return offset_dict(current_offset(conn))
        finally:
            conn.close()

    # --- driver ----------------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        return offset_dict(StreamSeed.load(self.seed_path).initial_offset())

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._head()

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        head = self._target if self._target is not None else self._head()
        return head if offset_from_dict(head) > offset_from_dict(start) else start

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        conn = self._source().connect()
        try:
            ranges = plan_decode_ranges(conn, offset_from_dict(start), offset_from_dict(end), self.decode_pieces)
        finally:
            conn.close()
        low, high = self.server_id_range
        base = pick_server_id(self.server_id_range)
        return [BinlogRange(offset_dict(r.read_from), offset_dict(r.decode_after) if r.decode_after else None,
                            offset_dict(r.end), low + (base - low + i) % (high - low + 1)) for i, r in enumerate(ranges)]

    def commit(self, end: dict[str, Any]) -> None:
        pass

    # --- executors -------------------------------------------------------------------------------
    def read(self, partition: BinlogRange) -> Iterator[tuple]:
        source = self._source()
        seed = StreamSeed.load(self.seed_path)
        conn = source.connect()
        try:
            schemas = [load_table_schema(conn, t) for t in seed.tables]
        finally:
            conn.close()
        orderings = {s.table_id: KeyOrdering(s.column(seed.chunk_keys[s.table_id]), source.connect) for s in schemas}
        split_filter = FinishedSplitFilter(seed.finished_splits, orderings) if seed.finished_splits else None
        snapshotted = {f.split.table_id for f in seed.finished_splits}
        reader = BinlogReader.for_schemas(
            source, schemas, start=offset_from_dict(partition.read_from), end=offset_from_dict(partition.end),
            decode_after=offset_from_dict(partition.decode_after) if partition.decode_after else None,
            server_id=partition.server_id)
        batch: list[ChangeRecord] = []
        try:
            for item in reader:
                if isinstance(item, ChangeRecord):
                    batch.append(item)
                    if len(batch) >= 1000:
                        yield from _emit(batch, split_filter, snapshotted)
                        batch = []
                elif isinstance(item, SchemaChangeEvent):
                    yield from _emit(batch, split_filter, snapshotted)
                    batch = []
                    yield _ddl_row(item)
            yield from _emit(batch, split_filter, snapshotted)
        finally:
            for ordering in orderings.values():
                ordering.close()


def _emit(batch: list[ChangeRecord], split_filter: FinishedSplitFilter | None,
          snapshotted: set[TableId]) -> Iterator[tuple]:
    """Snapshotted tables go through the finished-split filter; tables streamed from an offset pass."""
    decisions = split_filter.filter(batch) if split_filter else [True] * len(batch)
    kept = [r for r, keep in zip(batch, decisions) if keep or r.table_id not in snapshotted]
    if kept:
        first = kept[0]
        yield (first.offset.version, first.row, first.part, "changes", len(kept),
               max(r.timestamp_ms for r in kept), pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL))


def _ddl_row(event: SchemaChangeEvent) -> tuple:
    return (event.offset.version, 0, 0, "ddl", 1, event.timestamp_ms, pickle.dumps([event]))


class BinlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> BinlogStreamReader:
        return BinlogStreamReader(self.options)
