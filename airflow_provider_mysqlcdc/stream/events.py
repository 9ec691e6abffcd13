"""What a micro-batch carries besides row changes and the core's records: the messages from the
binlog source (spark/binlog_source.py) to the stream's rules (applier.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import BinlogPurged, SchemaChangeEvent, TableFailed, WindowChange
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
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


@dataclass(frozen=True)
class PieceRead:
    """How one decoding task of a micro-batch (a piece of its binlog range, on an executor) spent its
    time: when it began (the executor's clock, seconds since the epoch), its set-up (the tables'
    schemas and orderings, the reader), its reading (framing, decoding, filtering, typing the rows)
    and the changes it sent. Not an item to apply: the batch's log line sums them up
    (``reading_summary``), which says how much of a batch's reading is Spark's (scheduling, the
    Python workers' start, the rows' way back) and how much is the pieces' own."""

    read_from: str
    end: str
    began_at: float
    set_up_s: float
    reading_s: float
    changes: int


def reading_summary(pieces: list[PieceRead], batch_began_at: float) -> str:
    """The pieces of a batch that began at ``batch_began_at`` (the driver's clock), in a few words:
    when they began into the batch, their set-up and reading seconds (ranges over the pieces) and the
    changes they sent; "" for a batch without any. When they began and ended compares the executors'
    clocks with the driver's: exact on one machine (local mode, the worker's shared server), off by
    the hosts' clock skew on a cluster; their set-up and reading are each measured on one clock."""
    if not pieces:
        return ""

    def span(values: list[float], unit: str = "s", digits: int = 2) -> str:
        low, high = min(values), max(values)
        return f"{low:.{digits}f}{unit}" if round(low, digits) == round(high, digits) else \
            f"{low:.{digits}f}-{high:.{digits}f}{unit}"

    began = [p.began_at - batch_began_at for p in pieces]
    return (f"{len(pieces)} piece(s) began {span(began)} into the batch, set up in "
            f"{span([p.set_up_s for p in pieces])}, read in {span([p.reading_s for p in pieces])}, "
            f"ended {span([b + p.set_up_s + p.reading_s for b, p in zip(began, pieces)])} into it "
            f"({sum(p.changes for p in pieces)} changes)")


#: one item of a micro-batch, in binlog order: a run of one table's row changes, a DDL statement, a
#: purge gap, a table that failed on the executors, tables activated, a staged split to apply
BatchItem = Union[TableChanges, SchemaChangeEvent, BinlogPurged, TableFailed, TablesActivated, StagedSplitReady]
