"""Cutting a dump's packets into events (cdc/binlog/dump.py): the compiled cutter and its Python twin
give the same events, and ``PacketReader.events`` gives every event however the bytes arrive.

The events of a real server's dump are held to python-mysql-replication's in
tests/integration/test_binlog_dump.py; here the packets are built, so that every way a dump's bytes
can be split (a packet cut anywhere by the network, continued events, the end, an error) is reached.
"""

from __future__ import annotations

import random
import socket
import struct
import threading

import pymysql
import pytest

from airflow_provider_mysqlcdc.cdc.binlog import dump
from airflow_provider_mysqlcdc.cdc.binlog.native import compiled

compiled_cut = compiled("cut_events")
needs_compiled = pytest.mark.skipif(compiled_cut is None, reason="mysqlcdc_rowcodec is not built (bin/setup builds it)")


def _event(kind: int, body: bytes, *, end: int, checksum: int = 4, timestamp: int = 1_700_000_000) -> bytes:
    """One event's packet payload: the OK byte, the 19-byte header, the body and a checksum."""
    size = 19 + len(body) + checksum
    return b"\x00" + dump.EVENT_HEADER.pack(timestamp, kind, 7, size, end, 0x0008) + body + b"\xab" * checksum


def _packets(payload: bytes, sequence: int = 1) -> bytes:
    """A payload as protocol packets: full ones continued, the last one shorter (possibly empty)."""
    out, at = bytearray(), 0
    while True:
        piece = payload[at:at + dump.FULL_PACKET]
        out += struct.pack("<I", len(piece))[:3] + bytes([sequence & 0xFF]) + piece
        sequence, at = sequence + 1, at + len(piece)
        if len(piece) < dump.FULL_PACKET:
            return bytes(out)


def _expected(payload: bytes, checksum: int = 4) -> dump.RawEvent:
    timestamp, kind, server_id, size, end, flags = dump.EVENT_HEADER.unpack_from(payload, 1)
    return dump.RawEvent(kind, timestamp, server_id, size, end, flags, payload[20:len(payload) - checksum])


def _random_events(rng: random.Random, count: int) -> list[bytes]:
    return [_event(rng.randrange(256), rng.randbytes(rng.choice((0, 1, 8, 40, 300, 5000))), end=4 + i * 100)
            for i in range(count)]


@needs_compiled
def test_the_compiled_cutter_and_the_python_one_cut_random_buffers_alike():
    rng = random.Random(48)
    for _ in range(200):
        buffer = bytearray(b"".join(_packets(p) for p in _random_events(rng, rng.randrange(1, 30))))
        cut_at = rng.randrange(len(buffer) + 1)  # a buffer may end anywhere inside a packet
        piece = buffer[:cut_at]
        wanted = bytes(rng.random() < 0.5 for _ in range(256))
        for checksum in (0, 4):
            ours = dump.cut_events(piece, 0, checksum, wanted, dump.RawEvent)
            theirs = compiled_cut(piece, 0, checksum, wanted, dump.RawEvent)
            assert theirs == ours
            assert all(type(event) is dump.RawEvent for event in theirs[0])


@pytest.mark.parametrize("cut", [dump.cut_events, compiled_cut], ids=["python", "compiled"])
def test_a_cutter_stops_before_a_packet_that_is_not_one_whole_event(cut):
    if cut is None:
        pytest.skip("mysqlcdc_rowcodec is not built (bin/setup builds it)")
    first = _event(dump.XID, b"\x01" * 8, end=100)
    head = _packets(first)
    for tail, why in ((b"\xfe\x00\x00\x02\x00", "the end of a non-blocking dump"),
                      (b"\xff\x28\x04#HY000" + b"x" * 40, "an error"),
                      (b"\x00" + b"z" * (dump.FULL_PACKET - 1), "a continued event")):
        buffer = bytearray(head + _packets(tail))
        found, at, stop = cut(buffer, 0, 4, dump.EVERY_EVENT, dump.RawEvent)
        assert (found, at, stop) == ([_expected(first)], len(head), dump.NOT_ONE_EVENT), why
    found, at, stop = cut(bytearray(head[:-1]), 0, 4, dump.EVERY_EVENT, dump.RawEvent)
    assert (found, at, stop) == ([], 0, dump.NEED_BYTES)


@pytest.mark.parametrize("cut", [dump.cut_events, compiled_cut], ids=["python", "compiled"])
def test_a_cutter_refuses_a_wanted_table_that_does_not_mark_every_event_type(cut):
    if cut is None:
        pytest.skip("mysqlcdc_rowcodec is not built (bin/setup builds it)")
    with pytest.raises(ValueError, match="wanted must mark each of the 256 event types, not 255"):
        cut(bytearray(), 0, 4, b"\x01" * 255, dump.RawEvent)


def _reader_over(data: bytes, rng: random.Random) -> dump.PacketReader:
    """A ``PacketReader`` on a socket that receives ``data`` in random pieces, then sees it closed."""
    ours, theirs = socket.socketpair()

    def send() -> None:
        at = 0
        while at < len(data):
            size = rng.choice((1, 3, 7, 100, 4096, 70_000, 2_000_000))
            theirs.sendall(data[at:at + size])
            at += size
        theirs.close()

    threading.Thread(target=send, daemon=True).start()
    return dump.PacketReader(ours)


def test_the_packet_reader_gives_every_wanted_event_however_the_bytes_arrive():
    rng = random.Random(4848)
    for _ in range(20):
        payloads = _random_events(rng, rng.randrange(1, 200))
        wanted = bytes(rng.random() < 0.7 for _ in range(256))
        data = b"".join(_packets(p) for p in payloads) + _packets(b"\xfe\x00\x00\x02\x00")
        found = list(_reader_over(data, rng).events(4, wanted))
        assert found == [_expected(p) for p in payloads if wanted[p[5]]]


def test_the_packet_reader_joins_a_continued_event_between_events_cut_in_bulk():
    rng = random.Random(7)
    small = [_event(dump.XID, rng.randbytes(8), end=100 + i) for i in range(3)]
    large = _event(30, rng.randbytes(dump.FULL_PACKET + 1000), end=90_000_000)
    exact = _event(dump.QUERY, rng.randbytes(dump.FULL_PACKET - 24), end=95_000_000)  # one full packet, one empty
    payloads = [small[0], large, small[1], exact, small[2]]
    data = b"".join(_packets(p) for p in payloads) + _packets(b"\xfe\x00\x00\x02\x00")
    assert list(_reader_over(data, rng).events(4)) == [_expected(p) for p in payloads]
    no_rows = bytes(kind != 30 for kind in range(256))  # a continued event not wanted is read past
    assert list(_reader_over(data, rng).events(4, no_rows)) == [_expected(p) for p in payloads if p is not large]


def test_the_packet_reader_raises_the_servers_error_after_the_events_before_it():
    rng = random.Random(11)
    first = _event(dump.XID, b"\x02" * 8, end=200)
    error = b"\xff" + struct.pack("<H", 1236) + b"#HY000" + b"Could not find first log file name in binary log index"
    events = _reader_over(_packets(first) + _packets(error), rng).events(4)
    assert next(events) == _expected(first)
    with pytest.raises(pymysql.err.OperationalError, match="Could not find first log file") as raised:
        next(events)
    assert raised.value.args[0] == 1236


def test_the_packet_reader_reports_a_connection_lost_inside_an_event():
    rng = random.Random(13)
    whole = _packets(_event(dump.XID, b"\x03" * 8, end=300))
    events = _reader_over(whole + whole[:10], rng).events(4)
    assert next(events).end_position == 300
    with pytest.raises(pymysql.err.OperationalError, match="Lost connection to server during the binlog dump"):
        next(events)
