"""The servers a pipeline has read from, and how their offsets order among each other.

A binlog offset (file, position) means something only on the server that wrote it. When the source
fails over to a replica that holds the same transactions under the same GTIDs (MariaDB with
``log_slave_updates`` and ``gtid_strict_mode``), the stream follows it: it finds the GTID position
it had read up to in the new server's binlog (cdc/binlog/gtid.py), records the new server as the
pipeline's next *epoch* in ``servers.json`` (``ServerHistory``), and from then on offsets read there
carry that epoch, which orders them after every offset of the servers before (cdc/model/offset.py).
Sink versions and positions order the same way, so no merge is skipped as "older".

Tasks that do not keep the history (chunk jobs, the planner) record the server id and the GTID
position with each offset they read (``current_offset``); ``place`` (state/epochs.py) gives such an offset its epoch
when the stream reads it. An offset of a server the stream has not followed yet is placed in the
next epoch, the one that server gets when the stream follows it.

An offset of an earlier server that the stream still has to read from (its own position, or a high
watermark of a split it has not activated yet) is translated into the new server's binlog by its
GTID position (``follow`` and ``translate``): a server that lacks those transactions, or a source
without GTIDs, is refused with the way out, never read from the wrong place.
"""

from __future__ import annotations

import datetime as dt
import logging

import pymysql

from airflow_provider_mysqlcdc.cdc.binlog.gtid import offset_at_gtid_position
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.server import (
    binlog_changed_error,
    binlog_file_sizes,
    bytes_between,
    current_offset,
    server_info,
)
from airflow_provider_mysqlcdc.protocol.servers import ServerEpoch, ServerHistory
from airflow_provider_mysqlcdc.state.epochs import place
from airflow_provider_mysqlcdc.state.registry import SERVERS, PipelineState

log = logging.getLogger(__name__)


class ServerEpochs:
    """The pipeline's server history (``servers.json`` in its state location)."""

    def __init__(self, state: PipelineState):
        self.state = state
        self._translated: dict[tuple[BinlogOffset, int], BinlogOffset] = {}

    def history(self) -> tuple[ServerEpoch, ...]:
        return self.state.servers().epochs

    def head(self, conn: pymysql.connections.Connection) -> BinlogOffset:
        """The binlog head of the server ``conn`` reaches, in its epoch."""
        return place(self.state.servers(), current_offset(conn))

    def behind(self, conn: pymysql.connections.Connection, offset: BinlogOffset) -> tuple[BinlogOffset, int | None]:
        """The head of the server ``conn`` reaches, and how many binlog bytes ``offset`` is behind it
        (None when ``offset`` lies on another server: bytes of two servers' binlogs do not add up)."""
        head = self.head(conn)
        if offset.epoch != head.epoch:
            return head, None
        return head, bytes_between(offset, head, binlog_file_sizes(conn))

    def begin(self, head: BinlogOffset) -> BinlogOffset:
        """Record the pipeline's first server (``head`` read from it), unless it has one already;
        returns ``head`` in its server's epoch."""
        if not self.history() and head.server_id is not None:
            self._write((ServerEpoch(0, head.server_id, None, _now()),))
        return place(self.state.servers(), head)

    def follow(self, conn: pymysql.connections.Connection, read_up_to: BinlogOffset) -> BinlogOffset:
        """``read_up_to`` (where the stream has read to, maybe on an earlier server) as an offset in
        the binlog of the server ``conn`` reaches, in that server's epoch. The first time the pipeline
        meets a new server, this checks the server holds everything read so far and records it."""
        head = current_offset(conn)
        history = self.history()
        if not history:
            first = read_up_to.server_id if read_up_to.server_id is not None else head.server_id
            if first is None:
                return read_up_to
            history = (ServerEpoch(0, first, None, _now()),)
            self._write(history)
        latest = history[-1]
        if head.server_id is None or head.server_id == latest.server_id:
            return read_up_to if read_up_to.epoch == latest.epoch else self.translate(conn, read_up_to, latest.epoch)
        epoch = latest.epoch + 1
        here = self.translate(conn, read_up_to, epoch)
        self._write(history + (ServerEpoch(epoch, head.server_id, read_up_to.gtid_set, _now()),))
        log.warning("The source failed over from server_id %s to server_id %s: the stream continues there at %s, "
                    "where that server's binlog holds GTID position %s (server epoch %d)", latest.server_id,
                    head.server_id, here, read_up_to.gtid_set, epoch)
        return here

    def translate(self, conn: pymysql.connections.Connection, offset: BinlogOffset, epoch: int) -> BinlogOffset:
        """The offset in the binlog of the server ``conn`` reaches (epoch ``epoch``) that holds exactly
        the transactions ``offset`` has behind it (by its GTID position)."""
        key = (offset, epoch)
        if key not in self._translated:
            if not offset.gtid_set or not server_info(conn).is_mariadb:
                raise binlog_changed_error(
                    f"Offset {offset} was read from server_id {offset.server_id}, but this connection reaches "
                    f"another server: a failover is followed only on MariaDB with GTIDs (gtid_strict_mode=ON, "
                    "log_slave_updates=ON on the replicas), where the offset's GTID position says where to continue")
            self._translated[key] = offset_at_gtid_position(conn, offset.gtid_set).in_epoch(epoch)
        return self._translated[key]

    def _write(self, epochs: tuple[ServerEpoch, ...]) -> None:
        self.state.storage.write_record(ServerHistory(epochs), SERVERS, indent=1)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
