"""What a micro-batch carries besides row changes and the core's records: the messages from the
binlog source (spark/binlog_source.py) to the stream's rules (applier.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import BinlogPurged, SchemaChangeEvent, TableFailed, WindowChange
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.sinks.change_columns import TableChanges


@dataclass
class TablesActivated:
    """Tables (with their chunk keys) a micro-batch starts to capture; ``whole``: those whose every
    split it adds (a snapshot or re-snapshot of the whole table), whose sink table it may replace."""

    chunk_keys: dict[TableId, str]
    whole: tuple[TableId, ...] = ()


@dataclass
class StagedSplitReady:
    """A staged split to apply: its rows are at ``split.staged``, as of its high watermark;
    ``changes`` are its key range's changes after that, up to ``as_of`` (the batch's start)."""

    split: FinishedSplit
    as_of: BinlogOffset
    changes: list[WindowChange]


#: one item of a micro-batch, in binlog order: a run of one table's row changes, a DDL statement, a
#: purge gap, a table that failed on the executors, tables activated, a staged split to apply
BatchItem = Union[TableChanges, SchemaChangeEvent, BinlogPurged, TableFailed, TablesActivated, StagedSplitReady]
