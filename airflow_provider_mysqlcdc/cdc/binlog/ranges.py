"""Cutting the binlog: where a limited micro-batch ends, and pieces of a range decoded in parallel.

``batch_end``: a micro-batch honours a limit in bytes and events, and still ends where a
transaction ends (the batch's end offset is a safe resume point): the first transaction end at or
after the limit; a transaction larger than the limit makes a batch of its own. The server skips to
the event at the limit (``SHOW BINLOG EVENTS ... LIMIT skip, n``, listing.py) and only the events
from there to the next transaction end are listed.

``plan_decode_ranges``:

Decoding (python-mysql-replication) is the stream's bottleneck, and a large batch often is one big
transaction, so cutting only at transaction ends would not help. Instead the range is cut after row
events: a piece starts reading at the table-map event that its first row event needs, lets the
events up to its cut pass undecoded (``BinlogReader(decode_after=...)``; the library decodes rows
lazily), and decodes until the next cut. A piece starts at the first event of the transaction its
cut falls in (GTID or BEGIN), so it sees the transaction's GTID and every table map it may need.
Records carry their offsets, so the consumer restores the global order by sorting.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pymysql

from airflow_provider_mysqlcdc.cdc.binlog.listing import (
    ListedEvent,
    binlog_events,
    closes_transaction,
    files_between,
    listed_window,
    opens_transaction,
)
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source.server import gtid_position_at, gtid_position_text, gtid_positions

_ROW_EVENTS = ("write_rows", "update_rows", "delete_rows")
#: At most this many events are listed to find cut points; the rest of a range stays in its last piece.
MAX_LISTED_EVENTS = 200_000
#: Events listed around each cut of a range of many events (windowed_cuts)
WINDOW_EVENTS = 2_000


def batch_end(conn: pymysql.connections.Connection, start: BinlogOffset, head: BinlogOffset, *,
              max_bytes: int = 0, max_events: int = 0) -> BinlogOffset:
    """The end of a micro-batch starting at ``start`` (a transaction boundary): ``head``, or the first
    transaction end after ``max_bytes`` bytes or ``max_events`` events (0: no limit) when that comes
    first. A transaction larger than the limit is never cut: the batch ends where it ends.

    Found without listing the batch: the server skips to the event where a limit is reached
    (``_limit_event``), and the events from there are listed to the next transaction end; the batch
    end's GTID position is the server's at that offset. Where that cannot tell (an event limit past
    the start's file, a statement right after the limit whose group began before it), the events
    are listed from the start (``listed_batch_end``), as they were before: a 128 MiB batch listed
    that way took seconds of its planning."""
    if (not max_bytes and not max_events) or head <= start or _within_limits(conn, start, head, max_bytes, max_events):
        return head
    jumped = _jumped_end(conn, start, head, max_bytes, max_events)
    return jumped if jumped is not None else listed_batch_end(conn, start, head, max_bytes=max_bytes,
                                                               max_events=max_events)


def listed_batch_end(conn: pymysql.connections.Connection, start: BinlogOffset, head: BinlogOffset, *,
                     max_bytes: int = 0, max_events: int = 0) -> BinlogOffset:
    """``batch_end`` by listing every event from ``start``: the reference the skipping answer is held to."""
    read_bytes = events = 0
    in_transaction = False  # inside BEGIN ... COMMIT (a statement outside one, a DDL, ends where it ends)
    # the MariaDB GTID position as the batch goes, so that its end says which binlog it belongs to
    gtids = gtid_positions(start.gtid_set) if start.gtid_set else None
    for event in binlog_events(conn, start, head):
        read_bytes, events = read_bytes + event.end_position - event.position, events + 1
        if gtids is not None and event.kind.startswith("gtid") and "GTID " in event.info:
            domain, server, sequence = event.info.rsplit("GTID ", 1)[1].split()[0].split("-")
            gtids[int(domain)] = (int(server), int(sequence))
        if opens_transaction(event):
            in_transaction = True
        elif closes_transaction(event) or (event.kind == "query" and not in_transaction):
            in_transaction = False
            if (max_bytes and read_bytes >= max_bytes) or (max_events and events >= max_events):
                return _ends_at(event, head, gtids)
    return head


def _ends_at(event: ListedEvent, head: BinlogOffset, gtids: dict[int, tuple[int, int]] | None) -> BinlogOffset:
    return BinlogOffset(event.file, event.end_position, gtid_set=gtid_position_text(gtids or {}),
                        server_id=head.server_id, epoch=head.epoch)


def _jumped_end(conn: pymysql.connections.Connection, start: BinlogOffset, head: BinlogOffset, max_bytes: int,
                max_events: int) -> BinlogOffset | None:
    """``batch_end`` from the event where a limit is reached on (every closing event before it is
    under both limits, every one from it on over one), or None where that does not tell."""
    limit = _limit_event(conn, start, head, max_bytes, max_events)
    if limit is None:
        return None
    in_transaction: bool | None = None  # not known before the first group's first event
    for event in binlog_events(conn, limit.start, head):
        if opens_transaction(event):
            in_transaction = True
        elif event.kind.startswith("gtid"):  # a group of one statement (MariaDB), or MySQL's before its BEGIN
            in_transaction = False
        elif closes_transaction(event) or (event.kind == "query" and in_transaction is False):
            gtids = gtid_positions(start.gtid_set) if start.gtid_set else None
            if gtids is not None:  # the server's position at the end, as listing would have followed it
                for domain, (server, sequence) in gtid_positions(gtid_position_at(conn, event.end)).items():
                    if sequence >= gtids.get(domain, (0, -1))[1]:
                        gtids[domain] = (server, sequence)
            return _ends_at(event, head, gtids)
        elif event.kind == "query" and in_transaction is None:
            return None  # a statement: inside a transaction or one of its own, only its group's start says
    return head


def _limit_event(conn: pymysql.connections.Connection, start: BinlogOffset, head: BinlogOffset, max_bytes: int,
                 max_events: int) -> ListedEvent | None:
    """The first event after ``start`` at which ``max_bytes`` or ``max_events`` is reached, or None
    where it cannot be found by skipping (an event limit in a later file than the start's)."""
    found: list[ListedEvent] = []
    if max_events:
        at_limit = listed_window(conn, start, max_events - 1, 1)
        if at_limit:
            found.append(at_limit[0])
    if max_bytes:
        remaining = max_bytes
        for file, size in files_between(conn, start, head):
            first = start.position if file == start.file else 4
            if (head.position if file == head.file else size) - first >= remaining:
                event = _event_ending_at(conn, BinlogOffset(file, first, epoch=start.epoch), first + remaining)
                if event is None:
                    return None
                found.append(event)
                break
            remaining -= size - first
    if max_events and not any(e.file == start.file for e in found):
        return None  # the event limit lies past the start's file: its events are not counted by skipping
    return min(found, key=lambda e: e.start) if found else None


def _event_ending_at(conn: pymysql.connections.Connection, base: BinlogOffset, target: int,
                     window_events: int = WINDOW_EVENTS, tries: int = 16) -> ListedEvent | None:
    """The first event of ``base``'s file after ``base`` that ends at or after position ``target``:
    windows of events listed where their average size says it lies, the server skipping to each."""
    low, low_end = 0, base.position  # the first ``low`` events end before ``target``; the last of them at ``low_end``
    high: int | None = None  # an event index known to end at or after it
    skip = 0
    for _ in range(tries):
        window = listed_window(conn, base, skip, window_events)
        hit = next((e for e in window if e.end_position >= target), None)
        if hit is not None and (window[0] is not hit or skip == low):
            return hit  # the events before it in the window end before the target
        if hit is not None:
            high = skip
        elif len(window) < window_events:
            return None  # the file ends before it
        else:
            low, low_end = skip + len(window), window[-1].end_position
        average = (low_end - base.position) / low if low else \
            (window[-1].end_position - base.position) / (skip + len(window))
        guess = low + int((target - low_end) / max(average, 1.0)) - window_events // 2
        skip = max(low, min(guess, high - window_events) if high is not None else guess)
    return None


def _within_limits(conn: pymysql.connections.Connection, start: BinlogOffset, head: BinlogOffset, max_bytes: int,
                   max_events: int) -> bool:
    """Whether the range is under both limits (0: none), told without listing it: its bytes by the
    files' sizes, its events by asking the server for the event at the limit (it skips to it)."""
    if max_bytes and span_bytes(conn, start, head) >= max_bytes:
        return False
    if max_events:
        if start.file != head.file:
            return False
        at_limit = listed_window(conn, start, max_events - 1, 1)
        if at_limit and at_limit[0].end <= head:
            return False
    return True


def span_bytes(conn: pymysql.connections.Connection, start: BinlogOffset, end: BinlogOffset) -> int:
    """The binlog bytes from ``start`` to ``end``, across files."""
    sizes = files_between(conn, start, end)
    return sum(size for _, size in sizes) - start.position - (sizes[-1][1] - end.position if sizes else 0)


@dataclass(frozen=True)
class DecodeRange:
    read_from: BinlogOffset  # where the binlog connection starts
    decode_after: BinlogOffset | None  # events ending at or before this pass undecoded
    end: BinlogOffset  # events ending after this are not read


def plan_decode_ranges(conn: pymysql.connections.Connection, start: BinlogOffset, end: BinlogOffset,
                       pieces: int, min_bytes: int = 1 << 20, window_events: int = WINDOW_EVENTS) -> list[DecodeRange]:
    """Cut ``(start, end]`` into up to ``pieces`` ranges with about as many row events each."""
    whole = [DecodeRange(start, None, end)]
    if pieces < 2 or end <= start:
        return whole
    if span_bytes(conn, start, end) < min_bytes:
        return whole
    chosen = windowed_cuts(conn, start, end, pieces, window_events) if start.file == end.file else None
    if chosen is None:
        candidates = list(_cuts(binlog_events(conn, start, end), end, MAX_LISTED_EVENTS))
        if len(candidates) < pieces:
            return whole
        chosen = [candidates[(i * len(candidates)) // pieces - 1] for i in range(1, pieces)]
    ranges = []
    read_from, decode_after = start, None
    for cut, transaction in chosen:
        ranges.append(DecodeRange(read_from, decode_after, cut))
        read_from, decode_after = transaction, cut
    ranges.append(DecodeRange(read_from, decode_after, end))
    return ranges


def _cuts(events: Iterable[ListedEvent], end: BinlogOffset, limit: int) -> Iterator[tuple[BinlogOffset, BinlogOffset]]:
    """Where a piece may end, among ``events`` (at most ``limit`` of them, none ending at or after
    ``end``): after a row event, with the start of its transaction (where the next piece starts
    reading)."""
    transaction: BinlogOffset | None = None
    for count, event in enumerate(events):
        if count >= limit or event.end >= end:
            return
        if event.kind.startswith("gtid") or (opens_transaction(event) and transaction is None):
            transaction = event.start
        elif closes_transaction(event) or event.kind == "rotate":
            transaction = None
        elif event.kind.startswith(_ROW_EVENTS) and transaction is not None:
            yield event.end, transaction


def windowed_cuts(conn: pymysql.connections.Connection, start: BinlogOffset, end: BinlogOffset, pieces: int,
                  window_events: int = WINDOW_EVENTS) -> list[tuple[BinlogOffset, BinlogOffset]] | None:
    """The cuts of a range of one binlog file, found by listing only a window of events where each
    should fall: the server skips to a window (``LIMIT skip, n``) without sending what it skips, where
    listing the whole range cost as much as decoding a piece of it. The range's events are counted
    from their average size in its first window, so a cut falls near its share of the events. None
    when the range holds too few events for windows to pay, or a window holds no row event after a
    transaction start (one transaction spans it): then the whole listing decides."""
    first = listed_window(conn, start, window_events, 1)
    if not first or first[0].end >= end:
        return None
    estimated_events = window_events * (end.position - start.position) // max(first[0].position - start.position, 1)
    if estimated_events < 4 * window_events * pieces:
        return None
    chosen: list[tuple[BinlogOffset, BinlogOffset]] = []
    for i in range(1, pieces):
        cut = first_cut_in_window(listed_window(conn, start, i * estimated_events // pieces, window_events), end)
        if cut is None or (chosen and cut[0] <= chosen[-1][0]):
            return None
        chosen.append(cut)
    return chosen


def first_cut_in_window(window: list[ListedEvent], end: BinlogOffset) -> tuple[BinlogOffset, BinlogOffset] | None:
    """The first cut among a window of listed events, which may begin at any event: a transaction
    start counts only after a transaction's end or at a GTID event (MySQL writes BEGIN after its
    GTID event, which the next piece must read too)."""
    first = next((n for n, e in enumerate(window) if e.kind.startswith("gtid") or closes_transaction(e)), len(window))
    return next(_cuts(window[first:], end, len(window)), None)

