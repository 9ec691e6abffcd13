"""Reading the binlog into change records (events cut by our own framing or python-mysql-replication's:
framing.py).

The reader starts at an offset, optionally stops at an end offset (inclusive of every event that
ends at or before it), and otherwise reads to the binlog head (``follow=False``) or waits for new
events (``follow=True``). It yields, in binlog order:

- ``ChangeRecord`` for each row of the captured tables (an update that changes the row key becomes
  a delete plus a create, as Debezium does); ``columnar``: one ``ChangeRows`` per row event where
  ``TableDecoding.change_rows`` makes one, outside XA groups;
- ``SchemaChangeEvent`` for each DDL statement that touches a captured table, with what it does to
  each (binlog/ddl.py parses it; never silently dropped);
- ``TransactionCommitted`` after each committed transaction, whose offset is a safe resume point.

An XA transaction's rows are written at its ``XA PREPARE`` and happen only at its ``XA COMMIT``,
possibly much later (xa.py): they are emitted at the commit's offset, in their order, and never
when it is rolled back. A prepared group this reader read is held decoded when it is small
(``HELD_XA_ROWS``), else only its position, and read again at the commit (the reader reconnects after
it); a commit whose prepare lies before the reader's start is found in the server's binlog listing.

A transient fault (the server restarts, the connection drops) is ridden out within the source's
retry budget (source/retry.py): the reader reconnects at the last transaction boundary it reached
and reads past what it already handed out, so nothing is yielded twice or skipped.

Where our framing meets what it does not read (TLS, MySQL, rows no row decoder takes), the reader
goes on through the library from its last transaction boundary, in the same way (``LibraryNeeded``).

Traps handled here: rotations tracked from the rotate event's next file, end offsets compared as
(file, position); preflight rejects compressed payloads.
A table's rule (row filter, masks) is applied to its rows as they are decoded (records/table_rows.py).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from airflow_provider_mysqlcdc.cdc.binlog import library_fixes  # noqa: F401  (patches decoders on import)
from airflow_provider_mysqlcdc.cdc.binlog.ddl import parse_ddl
from airflow_provider_mysqlcdc.cdc.binlog.events import (
    BinlogEvent,
    GtidStarted,
    Rotated,
    RowsWritten,
    Statement,
    XaPrepared,
    XidCommitted,
)
from airflow_provider_mysqlcdc.cdc.binlog.framing import chosen_framing, open_framing
from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import chosen_decoder
from airflow_provider_mysqlcdc.cdc.binlog.table_decoding import TableDecodings
from airflow_provider_mysqlcdc.cdc.binlog.xa import (
    HELD_XA_ROWS,
    HeldXa,
    PreparedXa,
    XaCommit,
    XaGroup,
    Xid,
    find_prepared,
    parse_xa_statement,
    rows_at_commit,
)
from airflow_provider_mysqlcdc.cdc.errors import BinlogPurgedError, LibraryNeeded, describe_error, is_table_fault
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import (
    ChangeRecord,
    ChangeRows,
    SchemaChangeEvent,
    TableChange,
    TableEventKind,
    TableFailed,
)
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.records.table_rows import RowRules
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig, pick_server_id
from airflow_provider_mysqlcdc.cdc.source.server import check_offset_available

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class TransactionCommitted:
    offset: BinlogOffset
    gtid: str | None = None


BinlogItem = ChangeRecord | ChangeRows | SchemaChangeEvent | TransactionCommitted | TableFailed

class BinlogReader:
    """Iterates the binlog of one server from ``start`` as change records of the captured tables."""

    def __init__(self, source: SourceConfig, *, start: BinlogOffset, end: BinlogOffset | None = None,
                 tables: Collection[TableId] | None = None, key_columns: Mapping[TableId, tuple[str, ...]],
                 known_columns: Mapping[TableId, Mapping[str, Column]] | None = None, server_id: int | None = None,
                 follow: bool = False, heartbeat_s: float = 1.0, decode_after: BinlogOffset | None = None,
                 decoder: str | None = None, watch: Callable[[TableId], bool] | None = None,
                 rules: Mapping[TableId, RowRules] | None = None, framing: str | None = None, columnar: bool = False):
        self.source = source
        self.columnar = columnar  # row changes may come as ``ChangeRows``
        #: tables not captured whose DDL is still handed on (a table taking a name a pattern matches)
        self.watch = watch
        self.start = start
        self.end = end
        self.tables = set(tables) if tables is not None else None
        self.key_columns = dict(key_columns)
        #: the tables' columns as information_schema describes them, for what a table map cannot say
        #: (table_map.py: MariaDB's UUID and INET types look like BINARY there)
        self.known_columns = {t: dict(columns) for t, columns in (known_columns or {}).items()}
        self.server_id = server_id if server_id is not None else pick_server_id()
        self.follow = follow
        self.heartbeat_s = heartbeat_s
        #: events ending at or before this offset are read past without decoding (ranges.py)
        self.decode_after = decode_after
        #: the offset after the last event read, and after the last committed transaction
        self.position = start
        self.committed = start
        #: which decoder turns row events into values (row_decoder.py: compiled, python or library)
        self.decoder = chosen_decoder(decoder)
        self._gtid: str | None = None
        #: how each table map's rows are decoded
        self.rules = dict(rules or {})  # each table's rule on its rows (none: every row as it is)
        self._decodings = TableDecodings(self.decoder, self.key_columns, self.known_columns, self.rules)
        #: row events decoded, by which decoder: the chosen one, or "library" for the tables it leaves
        self.events_decoded: Counter[str] = Counter()
        #: how the binlog is cut into events (framing.py): auto (ours, left for the library where it
        #: cannot read), or library; and how many events each framing read
        self.framing = "library" if self.decoder == "library" else chosen_framing(framing)
        self.events_framed: Counter[str] = Counter()
        self._framing: Any = None
        #: the XA group being read (between its first event and its prepare), and the prepared groups
        #: whose outcome has not been read yet, by xid
        self._xa_group: XaGroup | None = None
        self._prepared: dict[Xid, HeldXa] = {}
        self._held_rows = 0
        self._xa_commit: XaCommit | None = None
        #: the last GTID event (a transaction group's first event) and the offset after it
        self._group_gtid: tuple[GtidStarted, BinlogOffset] | None = None
        #: reading a prepared XA group again for its commit: its rows are emitted as they come
        self._replaying = False

    @classmethod
    def for_schemas(cls, source: SourceConfig, schemas: Collection[TableSchema], **kwargs: Any) -> "BinlogReader":
        return cls(
            source,
            tables=[s.table_id for s in schemas],
            key_columns={s.table_id: s.key_columns for s in schemas},
            known_columns={s.table_id: {c.name: c for c in s.columns} for s in schemas},
            rules={s.table_id: r for s in schemas if (r := RowRules.of(s, source.salt)) is not None},
            **kwargs,
        )

    def __iter__(self) -> Iterator[BinlogItem]:
        self.source.run(lambda conn: check_offset_available(conn, self.start), f"checking binlog offset {self.start}")
        if self.end is not None and self.end <= self.start:
            return
        policy, attempt, fault_started = self.source.retry_policy, 0, 0.0
        read_from, decode_after = self.start, self.decode_after
        while True:
            try:
                for item in self._read(read_from, decode_after):
                    attempt = 0  # events flow again: a later fault gets the whole budget
                    yield item
                commit, self._xa_commit = self._xa_commit, None
                if commit is None:
                    return
                self.close()
                yield from self._replay_committed(commit)
                if self.end is not None and commit.offset >= self.end:
                    return
                read_from = commit.offset
            except LibraryNeeded as exc:
                if self.framing == "library":
                    raise
                log.info("reading the binlog from %s through python-mysql-replication: %s", self.committed, exc)
                self.framing = "library"
                read_from, decode_after = self._resume_point(decode_after)
            except Exception as exc:  # noqa: BLE001 - backoff re-raises what is not transient
                if attempt == 0:
                    fault_started = time.monotonic()
                policy.backoff(exc, fault_started, attempt, f"reading the binlog at {self.position}")
                attempt += 1
                read_from, decode_after = self._resume_point(decode_after)
            finally:
                self.close()

    def _resume_point(self, decode_after: BinlogOffset | None) -> tuple[BinlogOffset, BinlogOffset | None]:
        """Where to read again after a fault: the last transaction boundary, reading past (not
        yielding again) what this reader already handed out."""
        if self.position > self.committed:
            decode_after = self.position if decode_after is None else max(decode_after, self.position)
        return self.committed, decode_after

    def _read(self, read_from: BinlogOffset, decode_after: BinlogOffset | None) -> Iterator[BinlogItem]:
        self._framing = open_framing(self.framing, self.source, read_from, server_id=self.server_id,
                                     follow=self.follow, heartbeat_s=self.heartbeat_s, tables=self.tables)
        framed = self._framing.name
        # offsets are compared by their sort keys, (file order, position): per event, comparing
        # BinlogOffsets was a fifth of the raw reader's time on small transactions
        end_key = self.end.sort_key if self.end is not None else None
        decode_key = decode_after.sort_key if decode_after is not None else None
        current_file, anchor = read_from.file, read_from  # an offset in the current file (``at`` is cheap there)
        file_order, count = read_from.sort_key[0], 0
        try:
            for event in self._framing.events():
                if isinstance(event, Rotated):
                    if event.next_file != current_file:
                        self._decodings.clear()
                    current_file = event.next_file
                    rotated = anchor = read_from.at(current_file, max(event.position, 4))
                    file_order = rotated.sort_key[0]
                    self.position = max(self.position, rotated)
                    continue
                if event.end == 0:  # artificial events sent on connect
                    continue
                key = (file_order, event.end)
                if end_key is not None and key > end_key:
                    break
                offset = anchor.at(current_file, event.end)
                before, committed_before = self.position, self.committed
                if key > before.sort_key:
                    self.position = offset
                count += 1
                if decode_key is not None and key <= decode_key:
                    self._read_past(event, offset)  # read by another piece of the range, or before a reconnect
                    continue
                try:
                    items = self._handle(event, offset)
                except Exception:  # nothing of this event was handed out: read again after a fault, or by
                    self.position, self.committed = before, committed_before  # the library (LibraryNeeded)
                    raise
                yield from items
                if self._xa_commit is not None:
                    # __iter__ reads the committed group again, then goes on after its commit: until its rows
                    # are handed out, the XA COMMIT counts as not read (a fault meanwhile reads it again)
                    self.position, self.committed = before, committed_before
                    return
                if end_key is not None and key >= end_key:
                    break
        finally:
            self.events_framed[framed] += count

    def _read_past(self, event: BinlogEvent, offset: BinlogOffset) -> None:
        """An event another reader decodes: its GTID still names the transaction, and an XA group is
        still followed (without its rows) for its commit."""
        if isinstance(event, GtidStarted):
            self._follow_group(event, offset, decoded=False)
        elif isinstance(event, XaPrepared):
            self._xa_prepared(event, offset, decoded=False)
        elif isinstance(event, Statement) and self._xa_group is None:
            parsed = parse_xa_statement(event.statement)
            if parsed is not None and parsed.verb == "START":
                self._open_xa_group(event, offset, decoded=False)

    def close(self) -> None:
        if self._framing is not None:
            self._framing.close()
            self._framing = None

    # --- events ----------------------------------------------------------------------------------
    def _handle(self, event: BinlogEvent, offset: BinlogOffset) -> Sequence[BinlogItem]:
        """What an event hands out, all of it made before any is handed out (row events first: most are)."""
        if isinstance(event, RowsWritten):
            table_id = event.table
            if self.tables is None or table_id in self.tables:
                group = self._xa_group
                if group is None:
                    return self._guarded_rows(event, table_id, offset, self.columnar)
                if group.rows is not None:  # prepared, not committed: held until its outcome
                    group.rows.extend(cast(list[ChangeRecord | TableFailed], self._guarded_rows(event, table_id, offset)))
                    if len(group.rows) > HELD_XA_ROWS:
                        group.rows = None  # read again at its commit
        elif isinstance(event, XidCommitted):
            self.committed = offset
            return (TransactionCommitted(offset, self._gtid),)
        elif isinstance(event, GtidStarted):
            self._follow_group(event, offset)
        elif isinstance(event, XaPrepared):
            return list(self._xa_outcome(self._xa_prepared(event, offset)))
        elif isinstance(event, Statement):
            return list(self._handle_query(event, offset))
        return ()

    def _watched(self, change: TableChange) -> bool:
        """A table that is not captured takes a name ``watch`` is given (created, replaced, renamed to)."""
        if self.watch is None:
            return False
        if change.kind is TableEventKind.RENAMED:
            return change.other is not None and self.watch(change.other)
        return change.kind in (TableEventKind.CREATED, TableEventKind.REPLACED) and self.watch(change.table)

    def _handle_query(self, event: Statement, offset: BinlogOffset) -> Iterator[BinlogItem]:
        statement = event.statement
        if statement.lstrip()[:2].upper() == "XA":
            yield from self._xa_statement(event, statement, offset)
            return
        if statement.strip().upper() == "COMMIT":  # end of a non-transactional engine's statement
            self.committed = offset
            yield TransactionCommitted(offset, self._gtid)
            return
        database = event.schema
        ddl = parse_ddl(statement, database)
        changes: tuple[TableChange, ...] = ()
        if ddl is not None:
            changes = ddl.changes
            if ddl.dropped_database is not None and self.tables is not None:
                changes += tuple(TableChange(TableEventKind.DROPPED, t) for t in sorted(self.tables)
                                 if t.database == ddl.dropped_database)
            if self.tables is not None:
                changes = tuple(c for c in changes if c.table in self.tables or self._watched(c))
        if not changes:
            if ddl is not None:
                self.committed = offset  # DDL of other tables commits too
            return
        log.warning("DDL at %s: %s", offset, statement)
        yield SchemaChangeEvent(database, statement, offset, changes, event.timestamp * 1000)
        # DDL commits implicitly: the offset after it is a safe resume point.
        self.committed = offset
        yield TransactionCommitted(offset, self._gtid)

    # --- XA transactions (xa.py) -----------------------------------------------------------------
    def _follow_group(self, event: GtidStarted, offset: BinlogOffset, decoded: bool = True) -> None:
        """A GTID event starts a group (MariaDB marks an XA transaction's); ``decoded``: its rows are
        decoded (else another piece of the range, or this reader before a reconnect, handled them)."""
        self._gtid = event.gtid
        self._group_gtid = (event, offset)  # its start is needed only where an XA group opens
        if event.prepared_xa:
            self._open_xa_group(event, offset, decoded)

    def _open_xa_group(self, event: BinlogEvent, offset: BinlogOffset, decoded: bool) -> None:
        """An XA transaction's group begins: at its GTID event (MariaDB's, or the one before MySQL's
        ``XA START`` query)."""
        if not self._replaying:
            self._xa_group = XaGroup(_event_start(*(self._group_gtid or (event, offset))), [] if decoded else None)

    def _xa_statement(self, event: Statement, statement: str, offset: BinlogOffset) -> Iterator[BinlogItem]:
        parsed = parse_xa_statement(statement)
        if parsed is None or self._replaying:
            return
        if parsed.verb == "START":
            self._open_xa_group(event, offset, decoded=True)
        elif parsed.verb == "ROLLBACK":
            self._forget(parsed.xid)
            self.committed = offset
            yield TransactionCommitted(offset, self._gtid)
        elif parsed.verb == "COMMIT" and parsed.one_phase and self._xa_group is not None:
            yield from self._xa_outcome(self._xa_prepared(None, offset, one_phase_xid=parsed.xid))
        elif parsed.verb == "COMMIT":
            held = self._forget(parsed.xid)
            prepared = held.prepared if held is not None else self._find_prepared(parsed.xid, offset)
            yield from self._xa_outcome(XaCommit(prepared, offset, self._gtid, event.timestamp * 1000,
                                                  held.rows if held is not None else None))

    def _xa_outcome(self, commit: "XaCommit | None") -> Iterator[BinlogItem]:
        """A committed XA group's rows, when held; else __iter__ reads the group again (``_xa_commit``)."""
        if commit is None:
            return
        if commit.rows is None:
            self._xa_commit = commit
            return
        yield from rows_at_commit(commit.rows, commit.offset, commit.gtid, commit.timestamp_ms)
        self.committed = commit.offset
        yield TransactionCommitted(commit.offset, commit.gtid)

    def _xa_prepared(self, event: XaPrepared | None, offset: BinlogOffset, decoded: bool = True,
                     one_phase_xid: Xid | None = None) -> XaCommit | None:
        """The end of an XA group: prepared (held until its outcome), or committed in one phase (the
        commit to emit, by ``_xa_outcome``)."""
        group, self._xa_group = self._xa_group, None
        self.committed = offset  # a group ends here: a safe resume point
        if self._replaying or group is None:
            return None
        if not decoded and (event is None or event.one_phase):
            return None  # committed in one phase where this reader does not decode: handled there
        xid: Xid | None
        if event is not None:
            xid, one_phase = event.xid, event.one_phase
        else:
            xid, one_phase = one_phase_xid, True
        assert xid is not None
        rows = group.rows if decoded else None
        prepared = PreparedXa(xid, group.start, offset)
        if not one_phase:
            if rows is not None and self._held_rows + len(rows) > HELD_XA_ROWS:
                rows = None  # too many held already: read again at the commit
            self._held_rows += len(rows or ())
            self._forget(xid)
            self._prepared[xid] = HeldXa(prepared, rows)
            return None
        timestamp_ms = 0 if event is None else event.timestamp * 1000
        return XaCommit(prepared, offset, self._gtid, timestamp_ms, rows)

    def _forget(self, xid: Xid) -> "HeldXa | None":
        held = self._prepared.pop(xid, None)
        if held is not None:
            self._held_rows -= len(held.rows or ())
        return held

    def _find_prepared(self, xid: Xid, commit: BinlogOffset) -> PreparedXa:
        found = self.source.run(lambda conn: find_prepared(conn, xid, commit), f"finding the XA PREPARE of {xid}")
        if found is None:
            raise BinlogPurgedError(
                f"XA COMMIT {xid} at {commit}: the server's binlog no longer holds the XA PREPARE that wrote its "
                "rows (purged before the transaction was committed), so its changes cannot be read. Keep binlogs "
                "at least as long as XA transactions stay prepared; re-snapshot the tables into a new sink "
                "location and state to recover.", missing=commit)
        log.info("XA COMMIT %s at %s: its rows were prepared at %s..%s", xid, commit, found.start, found.end)
        return found

    def _replay_committed(self, commit: XaCommit) -> Iterator[BinlogItem]:
        """The rows of a committed XA group, read again from its start to its prepare, at the commit."""
        replay = BinlogReader(self.source, start=commit.prepared.start, end=commit.prepared.end, tables=self.tables,
                              key_columns=self.key_columns, known_columns=self.known_columns,
                              server_id=self.server_id, decoder=self.decoder, rules=self.rules,
                              framing=self.framing)
        replay._replaying = True
        rows = (item for item in replay if isinstance(item, (ChangeRecord, TableFailed)))
        yield from rows_at_commit(rows, commit.offset, commit.gtid, commit.timestamp_ms)
        self.events_decoded.update(replay.events_decoded)
        self.committed = self.position = max(self.position, commit.offset)
        yield TransactionCommitted(commit.offset, commit.gtid)

    def _guarded_rows(self, event: RowsWritten, table_id: TableId, offset: BinlogOffset, columnar: bool = False
                      ) -> list[ChangeRecord | ChangeRows | TableFailed]:
        """The event's row changes, or a ``TableFailed`` where its table's data or schema fails them (the table stops)."""
        try:
            return list(self._rows(event, table_id, offset, columnar))  # decoded now, so that a fault is caught here
        except Exception as exc:  # noqa: BLE001 - what is not the table's is raised again
            if not is_table_fault(exc):
                raise
            log.warning("%s: a row event at %s cannot be decoded: %s", table_id, offset, describe_error(exc))
            return [TableFailed(table_id, offset, f"a change at {offset} cannot be decoded: {describe_error(exc)}")]

    def _rows(self, event: RowsWritten, table_id: TableId, offset: BinlogOffset, columnar: bool
              ) -> list[ChangeRecord] | list[ChangeRows]:
        decoding = self._decodings.of(event, table_id)
        if columnar and (rows := decoding.change_rows(event, table_id, offset, self._gtid)) is not None:
            self.events_decoded[self.decoder] += 1
            return [rows]  # records where it makes none, and in XA groups: xa.py restamps them at the commit
        records, by_row_decoder = decoding.changes(event, table_id, offset, self._gtid)
        self.events_decoded[self.decoder if by_row_decoder else "library"] += 1
        return records


def _event_start(event: BinlogEvent, offset: BinlogOffset) -> BinlogOffset:
    """Where an event that ends at ``offset`` starts."""
    return offset.at(offset.file, offset.position - event.size)
