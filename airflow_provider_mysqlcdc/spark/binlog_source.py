"""A PySpark streaming data source over the binlog (``spark.readStream.format("mysqlcdc_binlog")``).

Offsets are ``StreamOffset`` records (protocol/offsets.py): a binlog position read from ``SHOW
MASTER STATUS`` (always between transactions, so a micro-batch never ends inside one), the number
of the registry generation (state/registry.py) the batch captures, and which binlog the position
belongs to (the MariaDB GTID position there and the server id): each batch checks them, and the
first batch of a query checks exactly that the server's binlog holds the start
(server.py ``check_same_binlog``), so a reset, restored or other server's binlog is refused.

A micro-batch ``(start, end]`` is decoded with ``end``'s tables and finished-split filter, on the
executors. When ``end`` has a newer generation than ``start``, the splits it adds are activated
first, by one more partition, as stream/activation.py decides (stream/reading.py reads it; this
class plans the partitions and emits their items as rows):

- the tables it adds are announced (``TablesActivated``), so the driver prepares their sink tables;
- for every added split whose high watermark ``h`` is behind ``start``, the binlog ``(h, start]`` of
  its key range is read again: for a split the chunk job wrote directly, these changes are merged
  like any other (they are older than every change of the batch); for a staged split they travel
  with it (``StagedSplitReady``) and the driver merges them into the staged rows before replacing
  the range, so the sink jumps from its old state straight to the state at ``start``.

Every change of an added split after its high watermark is therefore applied exactly once: those up
to ``start`` by the activation, those after by this and later batches (the filter drops the rest).

A micro-batch ends where a transaction ends, after at most ``max_batch_bytes`` of binlog or
``max_batch_events`` events (ranges.py ``batch_end``; a larger transaction makes a batch of its own).
Its rows are described in batch_rows.py: what a partition decodes beyond ``inline_bytes`` travels
through spill files in the state location, not through Spark, so neither side holds a whole batch.

A change that cannot be decoded or typed because of its table's data or schema does not fail the
partition: the table's ``TableFailed`` takes its place (stream/reading.py), and the driver freezes that
table there, unless the change could not be applied anyway (before every split's high watermark).

Table DDL in an activation's re-read ``(h, start]`` counts too: for a table the chunk job wrote
directly, its ``SchemaChangeEvent`` travels like in any batch (a ``TRUNCATE`` there removes exactly
the rows older than it); for a staged split, a ``TRUNCATE`` of its table joins its ``changes``.
Executors describe a table that has left the server (dropped, renamed) by its last remembered
schema (state/schemas.py).

Options: ``job`` (the stream job file's JSON, protocol/jobs.py ``StreamJob``: the state location,
replica server ids, decode pieces, batch limits, inline bytes, ``on_binlog_purged`` and the retry
budget, each with its one default there), ``source`` (the source's settings as
``SourceConfig.for_executors`` gives them: the path of a private credentials file, never the
password itself, since options show up in query plans; on Spark Connect a file on the server),
``initial_offset`` (where a
query without a checkpointed offset starts; default: the registry's smallest high watermark, at
generation 0). With ``on_binlog_purged="resnapshot"``, a batch whose start was purged reads from
the oldest binlog left and announces the gap with ``BinlogPurged``, and an activation whose re-read
was purged skips those tables the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, InternalError
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig, parse_server_id_range
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.spark.batch_rows import SCHEMA, RowEmitter
from airflow_provider_mysqlcdc.state.credentials import install_from_private_file
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.spill import new_spill_folder
from airflow_provider_mysqlcdc.stream.batches import BatchPlanner, BatchRead
from airflow_provider_mysqlcdc.stream.positions import registry_start_offset
from airflow_provider_mysqlcdc.stream.reading import BinlogReading

SOURCE_NAME = "mysqlcdc_binlog"




class BinlogPartition(InputPartition):
    """One read of a micro-batch (stream/batches.py), run by one executor task; what it reads beyond
    the inline budget goes into ``spill_folder`` (spark/batch_rows.py)."""

    def __init__(self, read: BatchRead, spill_folder: str):
        self.read, self.spill_folder = read, spill_folder


class BinlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side: where a batch ends and its partitions (stream/batches.py ``BatchPlanner``); ``read``
    runs on executors (on a pickled copy): stream/reading.py ``BinlogReading``."""

    def __init__(self, options: dict[str, str]):
        job = StreamJob.from_json(options["job"])
        self.state_location = job.state
        if "source" not in options:
            raise ConfigurationError(f"the {SOURCE_NAME} source needs the option source: the source's settings "
                                     "as SourceConfig.for_executors(private_file).to_json() gives them")
        self.source = SourceConfig.from_json(options["source"])
        # the planner (a Python worker of the driver's JVM) reads the state location, maybe on an
        # object store: its credentials are in the private file too (state/credentials.py)
        self._install_credentials()
        self.server_id_range = parse_server_id_range(job.server_id_range)
        self.decode_pieces = job.decode_pieces
        self.initial_offset = json.loads(options["initial_offset"]) if options.get("initial_offset") else None
        self.retry_budget_s = job.retry_budget_s
        self.on_binlog_purged = job.on_binlog_purged
        self.max_batch_bytes = job.max_batch_bytes
        self.max_batch_events = job.max_batch_events
        self.inline_bytes = job.inline_bytes
        self.changelog = job.changelog
        #: tables that take a name these match are handed on (their DDL), for the next run (state/new_tables.py)
        self.table_patterns, self.exclude_tables = job.table_patterns, job.exclude_tables
        self._target: dict[str, Any] | None = None
        self._planner: BatchPlanner | None = None  # driver only

    def _install_credentials(self) -> None:
        install_from_private_file(self.source.password_file)

    def _source(self) -> SourceConfig:
        return self.source.with_retry(self.retry_budget_s)

    def _state(self) -> PipelineState:
        return PipelineState(self.state_location)

    def _batches(self) -> BatchPlanner:
        if self._planner is None:
            self._planner = BatchPlanner(self._source(), self._state(), server_id_range=self.server_id_range,
                                         decode_pieces=self.decode_pieces, on_binlog_purged=self.on_binlog_purged)
        return self._planner

    # --- driver ----------------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        # fixed when the checkpoint was created (stream/identity.py stream_identity), so that a batch 0 Spark
        # runs again starts where it started the first time
        if self.initial_offset is not None:
            return self.initial_offset
        return registry_start_offset(self._state()).to_spark()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._batches().head().to_spark()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxBytes(self.max_batch_bytes) if self.max_batch_bytes else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        head = StreamOffset.from_spark(self._target) if self._target is not None else self._batches().head()
        if isinstance(limit, ReadAllAvailable):
            max_bytes = max_events = 0
        else:
            max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else 0
            max_events = limit.max_rows if isinstance(limit, ReadMaxRows) else self.max_batch_events
        return self._batches().end(StreamOffset.from_spark(start), head, max_bytes=max_bytes,
                                   max_events=max_events).to_spark()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        reads = self._batches().reads(StreamOffset.from_spark(start), StreamOffset.from_spark(end))
        spill = new_spill_folder(self._state())
        return [BinlogPartition(read, spill) for read in reads]

    def commit(self, end: dict[str, Any]) -> None:
        pass

    # --- executors -------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[tuple]:
        """The partition's read (stream/reading.py), as rows (spark/batch_rows.py)."""
        if not isinstance(partition, BinlogPartition):
            raise InternalError(f"unknown partition of the binlog source: {partition!r}")
        self._install_credentials()  # on an executor too: generations, spill files
        reading = BinlogReading(self._source(), self._state(), changelog=self.changelog,
                                table_patterns=self.table_patterns, exclude_tables=self.exclude_tables)
        rows = RowEmitter(partition.read.generation, spill_folder=partition.spill_folder,
                          inline_bytes=self.inline_bytes)
        yield from rows.rows(reading.read(partition.read))


class BinlogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> BinlogStreamReader:
        return BinlogStreamReader(dict(self.options))
