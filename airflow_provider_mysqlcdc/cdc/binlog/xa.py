"""XA transactions in the binlog: their identifiers, their statements, and finding a prepared one.

MariaDB (10.5+) and MySQL (5.7.7+) write an XA transaction's row events at ``XA PREPARE``, as one
group that ends with an XA prepare event, and its outcome later, possibly much later, as a separate
group: a query ``XA COMMIT xid`` or ``XA ROLLBACK xid``. So the rows of a prepared transaction are
in the binlog before anyone knows whether they will happen. The reader (reader.py) therefore never
emits them at the prepare: it remembers where the prepared group lies (``PreparedXa``), drops it at
``XA ROLLBACK``, and at ``XA COMMIT`` reads the group again and emits its rows at the commit's offset,
where they became visible (a small group's rows it read are held instead of read again). A reader
that starts between a prepare and its commit (a restarted stream, a snapshot split's window) finds
the prepared group in the server's binlog listing (``find_prepared``).

The group starts at the transaction's GTID event: MariaDB marks it (``XA START X'..',X'..',1 GTID
d-s-n`` in a listing, the prepared-XA flag in the event), MySQL writes a query ``XA START xid``
after its GTID event. ``XA COMMIT ... ONE PHASE`` is an ordinary transaction on MariaDB; MySQL
writes it as an XA group whose prepare event says "one phase": a commit at that event.

The server writes every xid in one form, ``X'<gtrid hex>',X'<bqual hex>',<formatID>``, in the
statements and the listing alike; ``Xid.parse`` also reads the forms a client may type.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pymysql

from airflow_provider_mysqlcdc.cdc.binlog.listing import ListedEvent, binlog_events
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset, binlog_file_number
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, TableFailed
from airflow_provider_mysqlcdc.cdc.source.server import binlog_file_sizes

#: MariaDB's GTID event flag of a prepared XA transaction's group (FL_PREPARED_XA)
MARIADB_PREPARED_XA_FLAG = 64

_STATEMENT = re.compile(r"^\s*XA\s+(START|BEGIN|END|PREPARE|COMMIT|ROLLBACK)\s+(.*?)\s*;?\s*$",
                        re.IGNORECASE | re.DOTALL)
_PART = re.compile(r"\s*(?:[xX]'([0-9a-fA-F]*)'|0[xX]([0-9a-fA-F]+)|'((?:[^'\\]|''|\\.)*)'|\"((?:[^\"\\]|\"\"|\\.)*)\""
                   r"|(\d+))\s*")
_SUFFIX = re.compile(r"\s*(ONE\s+PHASE|JOIN|RESUME|SUSPEND(?:\s+FOR\s+MIGRATE)?|FOR\s+MIGRATE)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Xid:
    """An XA transaction's identifier: global transaction id, branch qualifier, format id."""

    gtrid: bytes
    bqual: bytes = b""
    format_id: int = 1

    def __str__(self) -> str:
        return f"X'{self.gtrid.hex()}',X'{self.bqual.hex()}',{self.format_id}"

    @classmethod
    def parse(cls, text: str) -> "Xid | None":
        """The xid of ``'gtrid'[, 'bqual'[, formatID]]`` (quoted strings or hex literals), or None."""
        parts: list[bytes | int] = []
        rest = text.strip()
        while rest:
            match = _PART.match(rest)
            if match is None:
                return None
            hex_quoted, hex_bare, single, double, number = match.groups()
            if hex_quoted is not None or hex_bare is not None:
                digits = hex_quoted if hex_quoted is not None else hex_bare
                if len(digits) % 2:
                    digits = "0" + digits
                parts.append(bytes.fromhex(digits))
            elif single is not None or double is not None:
                quoted = single if single is not None else double
                parts.append(_unquote(quoted, "'" if single is not None else '"').encode("utf-8"))
            else:
                parts.append(int(number))
            rest = rest[match.end():]
            if rest.startswith(","):
                rest = rest[1:]
            elif rest:
                return None
        if not 1 <= len(parts) <= 3 or not all(isinstance(p, bytes) for p in parts[:2]):
            return None
        if len(parts) == 3 and not isinstance(parts[2], int):
            return None
        gtrid = parts[0]
        bqual = parts[1] if len(parts) > 1 else b""
        format_id = parts[2] if len(parts) > 2 else 1
        return cls(gtrid, bqual, format_id)  # type: ignore[arg-type]


def _unquote(text: str, quote: str) -> str:
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        elif char == quote and text[i + 1:i + 2] == quote:
            out.append(quote)
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class XaStatement:
    """An ``XA ...`` statement: its verb (upper case), its xid and whether it says ONE PHASE."""

    verb: str
    xid: Xid
    one_phase: bool = False


def parse_xa_statement(statement: str) -> XaStatement | None:
    """The XA statement ``statement`` is, or None when it is none (or an ``XA RECOVER``)."""
    match = _STATEMENT.match(statement)
    if match is None:
        return None
    verb, rest = match.group(1).upper(), match.group(2)
    suffix = _SUFFIX.search(rest)
    one_phase = False
    if suffix is not None:
        one_phase = suffix.group(1).upper().startswith("ONE")
        rest = rest[:suffix.start()]
    xid = Xid.parse(rest)
    if xid is None:
        return None
    return XaStatement("START" if verb == "BEGIN" else verb, xid, one_phase)


@dataclass(frozen=True)
class PreparedXa:
    """Where a prepared XA transaction's group lies in the binlog: from its first event (``start``,
    its GTID event) to the end of its prepare event (``end``)."""

    xid: Xid
    start: BinlogOffset
    end: BinlogOffset


def find_prepared(conn: pymysql.connections.Connection, xid: Xid, before: BinlogOffset) -> PreparedXa | None:
    """The last group that prepared ``xid`` and ends before ``before``, from the server's listing of its
    binlog: ``before``'s file first, then the files before it, newest first. None when no binlog
    left on the server holds it (purged, or never written)."""
    files = [name for name, _ in binlog_file_sizes(conn) if binlog_file_number(name) <= before.file_number]
    for name in reversed(files):
        start = BinlogOffset(name, 4, epoch=before.epoch)
        end = before if name == before.file else BinlogOffset(name, 1 << 62, epoch=before.epoch)
        found = None
        for prepared in prepared_groups(binlog_events(conn, start, end)):
            if prepared.xid == xid and prepared.end <= before:
                found = prepared
        if found is not None:
            return found
    return None


def prepared_groups(events: Iterator[ListedEvent]) -> Iterator[PreparedXa]:
    """The prepared XA groups among listed events, in order (one-phase commits are not prepared)."""
    group_start: BinlogOffset | None = None  # the last GTID event's position (a group's first event)
    xa_start: BinlogOffset | None = None
    for event in events:
        if event.kind.startswith(("gtid", "anonymous_gtid")):
            group_start = event.start
            xa_start = event.start if event.info.upper().startswith("XA START") else None  # MariaDB
        elif event.kind == "query":
            statement = parse_xa_statement(event.info)
            if statement is not None and statement.verb == "START":  # MySQL: after its GTID event
                xa_start = group_start or event.start
        elif event.kind == "xa_prepare":
            statement = parse_xa_statement(event.info)
            if statement is not None and statement.verb == "PREPARE" and xa_start is not None:
                yield PreparedXa(statement.xid, xa_start, event.end)
            xa_start = group_start = None


# --- what a binlog reader holds of XA groups until their outcome (reader.py) ----------------------

#: the rows of prepared XA groups a reader holds decoded until their outcome, all groups together; a
#: group that does not fit is read again at its commit (only its position is held)
HELD_XA_ROWS = 10_000


@dataclass
class XaGroup:
    """An XA transaction's group as the reader goes through it: where it starts, and its rows while
    they are few enough to hold (None: too many, or not decoded: read again at the commit)."""

    start: BinlogOffset
    rows: list[ChangeRecord | TableFailed] | None = field(default_factory=list)


@dataclass
class HeldXa:
    prepared: PreparedXa
    rows: list[ChangeRecord | TableFailed] | None


@dataclass(frozen=True)
class XaCommit:
    """The commit of a prepared group: its rows when held, else (None) the reader stops its
    connection, reads the group again, and goes on after the commit."""

    prepared: PreparedXa
    offset: BinlogOffset
    gtid: str | None
    timestamp_ms: int
    rows: list[ChangeRecord | TableFailed] | None = None


def rows_at_commit(rows: Iterable[ChangeRecord | TableFailed], offset: BinlogOffset, gtid: str | None,
               timestamp_ms: int) -> Iterator[ChangeRecord | TableFailed]:
    """An XA group's rows as changes of its commit: at the commit's offset, numbered in their order
    (a key change's delete and create keep one number and their parts). A table with a change that
    could not be decoded sends none of the group's changes, only its ``TableFailed``, first: the
    group is one transaction, applied whole or not at all."""
    rows = list(rows)
    failed = {f.table_id: f for f in reversed(rows) if isinstance(f, TableFailed)}
    for failure in failed.values():
        yield dataclasses.replace(failure, offset=offset)
    number, last = -1, None
    for record in rows:
        if isinstance(record, TableFailed) or record.table_id in failed:
            continue
        if (record.offset, record.row) != last:
            number, last = number + 1, (record.offset, record.row)
        yield ChangeRecord(record.op, record.table_id, record.before, record.after, offset, number, record.part,
                           gtid, timestamp_ms or record.timestamp_ms, record.schema)
