"""Which server epoch an offset belongs to (state/servers.py tells the story of epochs).

Tasks that do not keep the pipeline's server history (chunk jobs, the planner) record the server id
and the GTID position with each offset they read; ``place`` gives such an offset its epoch by the
history (``ServerHistory``, protocol/servers.py). An offset of a server the stream has not followed
yet is placed in the next epoch, the one that server gets when the stream follows it.
"""

from __future__ import annotations

import dataclasses

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.source.server import gtid_sequences
from airflow_provider_mysqlcdc.protocol.servers import ServerHistory


def epoch_of(history: ServerHistory, offset: BinlogOffset) -> int:
    """The epoch of the server ``offset`` was read from, by its server id and GTID position: a server
    followed twice by the stint whose starting GTID position the offset has passed, a server not
    followed yet by the next epoch (the one it gets when the stream follows it)."""
    if offset.server_id is None or not history.epochs:
        return offset.epoch
    same = [e for e in history.epochs if e.server_id == offset.server_id]
    if not same:
        return history.epochs[-1].epoch + 1
    have = gtid_sequences(offset.gtid_set)
    passed = [e for e in same if all(have.get(d, 0) >= n for d, n in gtid_sequences(e.since).items())]
    return max(e.epoch for e in passed or same)


def place(history: ServerHistory, offset: BinlogOffset) -> BinlogOffset:
    """``offset`` in the epoch of the server it was read from."""
    epoch = epoch_of(history, offset)
    return offset if epoch == offset.epoch else offset.in_epoch(epoch)


def place_split(history: ServerHistory, finished: FinishedSplit) -> FinishedSplit:
    """``finished`` with its high watermark placed in its server's epoch."""
    placed = place(history, finished.high_watermark)
    return finished if placed.epoch == finished.high_watermark.epoch else \
        dataclasses.replace(finished, high_watermark=placed)
