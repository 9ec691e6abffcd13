"""Two ways of cutting the binlog into the reader's events (events.py): our own (dump.py) and
python-mysql-replication's.

- **dump**: our replication connection and a plain loop over its bytes, about ten times cheaper
  per event than the library on small transactions (docs/benchmarks.md). MariaDB in plaintext only:
  a source with TLS settings, a server that offers TLS, or a MySQL server is read through the
  library (``LibraryNeeded`` before anything is read), and so are the rows no row decoder takes
  (row_decoder.py ``layout_for``: the reader reads on through the library from its last
  transaction boundary).
- **library**: python-mysql-replication, which connects over TLS, knows MySQL's events and decodes
  every column type; kept for all of the above and chosen by ``MYSQLCDC_BINLOG_FRAMING=library``.

``auto`` (the default) is ``dump`` where it can read, else ``library``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants.BINLOG import PARTIAL_UPDATE_ROWS_EVENT
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, RotateEvent, XAPrepareEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from airflow_provider_mysqlcdc.cdc.binlog import dump
from airflow_provider_mysqlcdc.cdc.binlog.events import (
    BinlogEvent,
    GtidStarted,
    Rotated,
    RowsWritten,
    Statement,
    XaPrepared,
    XidCommitted,
)
from airflow_provider_mysqlcdc.cdc.binlog.table_map import labels_in_charset
from airflow_provider_mysqlcdc.cdc.binlog.xa import MARIADB_PREPARED_XA_FLAG, Xid
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, LibraryNeeded
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import Operation
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source import tls
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig

#: the environment variable that picks a framing: auto (ours where it can read, else the library's) or library
FRAMING_VARIABLE = "MYSQLCDC_BINLOG_FRAMING"
FRAMINGS = ("auto", "library")


def chosen_framing(name: str | None = None) -> str:
    """The framing ``name`` (else the environment's, else auto) names."""
    chosen = (name or os.environ.get(FRAMING_VARIABLE) or "auto").strip().lower()
    if chosen not in FRAMINGS:
        raise ConfigurationError(f"{FRAMING_VARIABLE}={chosen!r} names no binlog framing; use one of "
                                 f"{', '.join(FRAMINGS)} (auto: our own where it can read the server, else "
                                 "python-mysql-replication's)")
    return chosen


class LibraryFraming:
    """The binlog from ``start`` as python-mysql-replication frames it."""

    name = "library"  # what the reader counts its events under (``BinlogReader.events_framed``)

    def __init__(self, source: SourceConfig, start: BinlogOffset, *, server_id: int, follow: bool,
                 heartbeat_s: float, tables: Collection[TableId] | None):
        self._stream = BinLogStreamReader(
            connection_settings=source.replication_settings(),
            server_id=server_id,
            log_file=start.file,
            log_pos=start.position,
            resume_stream=True,
            blocking=follow,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, QueryEvent, XidEvent, RotateEvent,
                         GtidEvent, MariadbGtidEvent, XAPrepareEvent],
            # Both filters let the library skip row events of other tables without decoding them.
            only_schemas=sorted({t.database for t in tables}) if tables else None,
            only_tables=sorted({t.table for t in tables}) if tables else None,
            slave_heartbeat=heartbeat_s if follow else None,
            # A table map is parsed once per table id (parsing each one was 40% of the library's time
            # on small transactions). The server gives an altered or renamed table a new id; ids
            # start over only after a restart, which begins a new binlog file, where the maps are
            # dropped (below, and by the library itself on a real rotation).
            freeze_schema=True,
        )
        self._file = start.file
        #: the table maps whose ENUM and SET labels are decoded in their charset, by their column list
        self._labelled: dict[int, list[Any]] = {}

    def events(self) -> Iterator[BinlogEvent]:
        for event in self._stream:
            if isinstance(event, RotateEvent):
                if event.next_binlog != self._file:
                    self._stream.table_map.clear()
                    self._labelled.clear()
                self._file = event.next_binlog
                yield Rotated(0, 0, 0, event.next_binlog, int(event.position))
                continue
            packet = event.packet
            end, size, timestamp = int(packet.log_pos), int(packet.event_size), int(event.timestamp)
            if isinstance(event, (GtidEvent, MariadbGtidEvent)):
                prepared = isinstance(event, MariadbGtidEvent) and bool(event.flags & MARIADB_PREPARED_XA_FLAG)
                yield GtidStarted(end, size, timestamp, str(event.gtid), prepared)
            elif isinstance(event, XidEvent):
                yield XidCommitted(end, size, timestamp)
            elif isinstance(event, QueryEvent):
                schema = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema or "")
                query = event.query if isinstance(event.query, str) else event.query.decode("utf-8", "replace")
                yield Statement(end, size, timestamp, schema, query)
            elif isinstance(event, XAPrepareEvent):
                xid = Xid(bytes(event.xid_gtrid), bytes(event.xid_bqual), int(event.xid_format_id))
                yield XaPrepared(end, size, timestamp, bool(event.one_phase), xid)
            else:
                if self._labelled.get(id(event.columns)) is not event.columns:
                    for column in event.columns:
                        labels_in_charset(column)
                    self._labelled[id(event.columns)] = event.columns
                update = isinstance(event, UpdateRowsEvent)
                operation = Operation.UPDATE if update else \
                    Operation.CREATE if isinstance(event, WriteRowsEvent) else Operation.DELETE
                # the library's packet: 20 header bytes, then what the event has read (up to its bitmaps)
                rows = memoryview(packet.packet.get_all_data())[20 + packet.read_bytes:20 + event.event_size]
                yield RowsWritten(end, size, timestamp, operation, TableId(event.schema, event.table), event.columns,
                                  event.number_of_columns, event.columns_present_bitmap,
                                  event.columns_present_bitmap2 if update else None,
                                  event.event_type == PARTIAL_UPDATE_ROWS_EVENT, rows, event)

    def close(self) -> None:
        self._stream.close()


#: the event types ``DumpFraming`` acts on: the dump cuts only these into events (heartbeats, format
#: descriptions, GTID lists, annotations and the like are skipped as bytes)
_ACTED_ON = bytes(kind in {*dump.ROW_OPERATIONS, dump.TABLE_MAP, dump.MARIADB_GTID, dump.XID, dump.QUERY,
                           dump.XA_PREPARE, dump.ROTATE} for kind in range(256))


class DumpFraming:
    """The binlog from ``start`` as our own replication connection frames it (dump.py): MariaDB in
    plaintext; ``LibraryNeeded`` is raised before anything is read where it cannot read."""

    name = "ours"

    def __init__(self, source: SourceConfig, start: BinlogOffset, *, server_id: int, follow: bool,
                 heartbeat_s: float, tables: Collection[TableId] | None):
        if source.ssl:
            raise LibraryNeeded("the source's settings name TLS")
        if tls.offers_tls(source.host, source.port) is None:  # not known, or not lately: a connection finds out
            source.connect().close()
        if tls.offers_tls(source.host, source.port) is not False:
            raise LibraryNeeded("the server offers TLS")
        self._tables = set(tables) if tables is not None else None
        self._start = start
        self._dump = dump.BinlogDump(source, start, server_id=server_id, follow=follow, heartbeat_s=heartbeat_s)

    def events(self) -> Iterator[BinlogEvent]:
        #: the captured tables' maps by table id (None: a table not captured), dropped in a new file
        maps: dict[int, tuple[TableId, list[dump.MapColumn]] | None] = {}
        current, tables = self._start.file, self._tables
        for kind, timestamp, server_id, size, end, _, body in self._dump.events(_ACTED_ON):
            if kind in dump.ROW_OPERATIONS:
                table_id, count, at = dump.rows_header(kind, body)
                found = maps.get(table_id)
                if found is None:
                    continue  # another table's, or written under a map read before the start
                operation = dump.ROW_OPERATIONS[kind]
                width = (count + 7) // 8
                present, at = body[at:at + width], at + width
                present_after = None
                if operation is Operation.UPDATE:
                    present_after, at = body[at:at + width], at + width
                yield RowsWritten(end, size, timestamp, operation, found[0], found[1], count,
                                  present, present_after, False, memoryview(body)[at:])
            elif kind == dump.TABLE_MAP:
                table_id, schema, table, at = dump.table_map_header(body)
                if table_id not in maps:
                    name = TableId(schema, table)
                    captured = tables is None or name in tables
                    maps[table_id] = (name, dump.table_map_columns(body, at)) if captured else None
            elif kind == dump.MARIADB_GTID:
                gtid, flags = dump.mariadb_gtid(body, server_id)
                yield GtidStarted(end, size, timestamp, gtid, bool(flags & MARIADB_PREPARED_XA_FLAG))
            elif kind == dump.XID:
                yield XidCommitted(end, size, timestamp)
            elif kind == dump.QUERY:
                schema, statement = dump.query(body)
                yield Statement(end, size, timestamp, schema, statement)
            elif kind == dump.XA_PREPARE:
                one_phase, format_id, gtrid, bqual = dump.xa_prepare(body)
                yield XaPrepared(end, size, timestamp, one_phase, Xid(gtrid, bqual, format_id))
            elif kind == dump.ROTATE:
                next_file, position = dump.rotate(body)
                if next_file != current:
                    maps.clear()  # table ids start over after a restart, which begins a new file
                current = next_file
                yield Rotated(0, 0, 0, next_file, position)

    def close(self) -> None:
        self._dump.close()


def open_framing(name: str, source: SourceConfig, start: BinlogOffset, *, server_id: int, follow: bool,
                 heartbeat_s: float, tables: Collection[TableId] | None) -> Any:
    """The framing ``name`` names of the binlog from ``start`` (auto: ours, which raises ``LibraryNeeded``
    where the library must read instead)."""
    kind = LibraryFraming if name == "library" else DumpFraming
    return kind(source, start, server_id=server_id, follow=follow, heartbeat_s=heartbeat_s, tables=tables)
