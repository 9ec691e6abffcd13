"""A fault while the binlog reader handles an event reads that event again: the reader resumes at its
last transaction boundary and reads past only what it handed out. An XA COMMIT whose prepared rows
must be looked up (``_find_prepared``) or read again (``_replay_committed``) is such an event: a fault
there used to leave it counted as read, and the transaction's rows were never handed out.

The binlog's events come from a scripted framing; the source answers the reader's queries."""

from __future__ import annotations

from collections.abc import Iterator

import pymysql
import pytest

from airflow_provider_mysqlcdc.cdc.binlog import reader as reader_module
from airflow_provider_mysqlcdc.cdc.binlog.events import GtidStarted, Statement, XidCommitted
from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader, TransactionCommitted
from airflow_provider_mysqlcdc.cdc.binlog.xa import PreparedXa, Xid
from airflow_provider_mysqlcdc.cdc.errors import SourceUnavailableError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.retry import RetryPolicy

START = BinlogOffset("binlog.000001", 4)
TABLE = TableId("shop", "orders")
XID = Xid(b"x")
PREPARED = PreparedXa(XID, START.at(START.file, 1000), START.at(START.file, 1500))
#: the binlog after START: a transaction, then the XA COMMIT of a group prepared before START
EVENTS = [GtidStarted(100, 30, 1, "0-1-5", False), XidCommitted(200, 31, 1),
          GtidStarted(2100, 30, 2, "0-1-7", False), Statement(2200, 60, 2, "shop", "XA COMMIT 'x'"),
          GtidStarted(2300, 30, 3, "0-1-8", False), XidCommitted(2400, 31, 3)]


class ScriptedFraming:
    name = "scripted"

    def __init__(self, start: BinlogOffset):
        self.start = start

    def events(self) -> Iterator:
        yield from (e for e in EVENTS if e.end > self.start.position)

    def close(self) -> None:
        pass


def transient() -> SourceUnavailableError:
    error = SourceUnavailableError("the source stayed unreachable")
    error.__cause__ = pymysql.err.OperationalError(2013, "Lost connection to server during query")
    return error


class ScriptedSource:
    """Answers the reader's queries: the offset check, and the XA PREPARE's place (after ``faults``)."""

    retry_policy = RetryPolicy(budget_s=30, first_delay_s=0.001, max_delay_s=0.001)

    def __init__(self, faults: int = 0):
        self.faults = faults

    def run(self, operation, what: str):
        if what.startswith("finding the XA PREPARE"):
            if self.faults:
                self.faults -= 1
                raise transient()
            return PREPARED
        return None


@pytest.fixture(autouse=True)
def _scripted_framing(monkeypatch):
    monkeypatch.setattr(reader_module, "open_framing", lambda name, source, start, **_: ScriptedFraming(start))


def _read(source: ScriptedSource, replays: list, replay_faults: int = 0, decode_after: BinlogOffset | None = None
          ) -> list:
    """What the reader hands out; each ``_replay_committed`` call is recorded, the first
    ``replay_faults`` of them failing before they hand anything out."""
    def replay(self, commit):
        replays.append(commit.offset)
        if len(replays) <= replay_faults:
            raise transient()
        yield TransactionCommitted(commit.offset, commit.gtid)  # stands in for the group's rows
        self.committed = self.position = max(self.position, commit.offset)

    reader = BinlogReader(source, start=START, tables=[TABLE], key_columns={TABLE: ("id",)},  # type: ignore[arg-type]
                          decode_after=decode_after)
    reader._replay_committed = replay.__get__(reader)  # type: ignore[method-assign]
    return [item.offset.position for item in reader if isinstance(item, TransactionCommitted)]


def test_an_xa_commit_is_handed_out_when_nothing_fails():
    replays: list = []
    assert _read(ScriptedSource(), replays) == [200, 2200, 2400]
    assert [o.position for o in replays] == [2200]


def test_a_fault_finding_an_xa_prepare_reads_the_commit_again():
    replays: list = []
    assert _read(ScriptedSource(faults=1), replays) == [200, 2200, 2400]
    assert [o.position for o in replays] == [2200]


def test_a_fault_reading_a_committed_xa_group_again_reads_the_commit_again():
    replays: list = []
    assert _read(ScriptedSource(), replays, replay_faults=1) == [200, 2200, 2400]
    assert [o.position for o in replays] == [2200, 2200]


def test_a_fault_reading_a_one_phase_xa_group_again_reads_the_commit_again(monkeypatch):
    """A one-phase XA COMMIT ends its group (the reader's last transaction boundary moves to it):
    while its rows are read again, that boundary stays before it, so a fault reads the commit again.
    The group's start lies in what another piece of the range decodes (``decode_after``), so this
    reader holds no rows of it and reads the group again at the commit."""
    one_phase = [GtidStarted(100, 30, 1, "0-1-5", False), XidCommitted(200, 31, 1),
                 GtidStarted(2100, 30, 2, "0-1-7", False), Statement(2150, 40, 2, "shop", "XA START 'y'"),
                 Statement(2200, 60, 2, "shop", "XA COMMIT 'y' ONE PHASE"),
                 GtidStarted(2300, 30, 3, "0-1-8", False), XidCommitted(2400, 31, 3)]
    monkeypatch.setitem(globals(), "EVENTS", one_phase)
    replays: list = []
    assert _read(ScriptedSource(), replays, replay_faults=1, decode_after=START.at(START.file, 2150)) == [2200, 2400]
    assert [o.position for o in replays] == [2200, 2200]
