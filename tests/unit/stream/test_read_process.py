"""The driver loop's read process (stream/read_process.py): a range read's items come back from a
real child process as they were read, errors and log lines with them; a read given up, a read
process that dies and a driver killed -9 each end it. Its reading stands in for the server (the
binlog's items are the integration tests'); what a position names is told by ``RangeRead.end``."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pyarrow as pa
import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, InternalError, SparkJobFailed
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.sinks.change_columns import TableChanges
from airflow_provider_mysqlcdc.stream.batches import GapRead, RangeRead
from airflow_provider_mysqlcdc.stream.events import PieceRead
from airflow_provider_mysqlcdc.stream.read_process import ReadProcess
from airflow_provider_mysqlcdc.stream.reading import CHANGES, DDL, PIECE, ReadItem

#: what the stand-in reading does for a read ending at this position
ITEMS, FAILS, FAILS_UNPICKLABLE, DIES, MANY, LOGS, PID = 10, 20, 30, 40, 50, 60, 70


@pytest.fixture(autouse=True)
def sink_format():
    """Once, not per sink variant (tests/unit/stream/conftest.py): no sink here."""
    return "delta"


class Unpicklable(Exception):
    def __init__(self, code: int, words: str):  # pickle calls Unpicklable(words): refused
        super().__init__(words)
        self.code = code


@dataclass
class StandIn:
    """Picklable into the read process; what it yields depends on where the read ends."""

    password: str = "s3cr3t-of-the-source"

    def read(self, read):
        what = read.end.position if isinstance(read, RangeRead) else PID
        if what == ITEMS:
            yield ReadItem((5, 0, 0), CHANGES, _changes(), 3, 1234)
            yield ReadItem((6, 0, 0), DDL, {"ddl": "ALTER TABLE t ADD c INT"}, 1, 99)
            yield ReadItem((0, 0, 0), PIECE, PieceRead("a", "b", 1.0, 0.1, 0.2, 3), 0)
        elif what == FAILS:
            yield ReadItem((5, 0, 0), DDL, "before", 1)
            raise ConfigurationError("the table cannot be read: fix its grants")
        elif what == FAILS_UNPICKLABLE:
            raise Unpicklable(3, "a type of its own")
        elif what == DIES:
            yield ReadItem((5, 0, 0), DDL, "before", 1)
            sys.stdout.flush()
            os._exit(7)
        elif what == MANY:
            for i in range(100_000):  # far more than the pipes hold
                yield ReadItem((i + 1, 0, 0), DDL, "x" * 1000, 1)
        elif what == LOGS:
            logging.getLogger("mysqlcdc.standin").warning("read %s in the read process", read.end.file)
        elif what == PID:
            yield ReadItem((1, 0, 0), DDL, os.getpid(), 1)


def _changes() -> TableChanges:
    return TableChanges(TableId("db", "t"), pa.table({"id": [1, 2, 3], "v": ["a", None, "c"]}))


def _range(what: int) -> RangeRead:
    return RangeRead(BinlogOffset("bin.000001", 4), None, BinlogOffset("bin.000001", what), 1, 1, {})


@pytest.fixture
def process():
    reading = ReadProcess(StandIn())
    yield reading
    reading.close()


def _pid_there(process: ReadProcess) -> int:
    return list(process.read(_range(PID)))[0].item


def test_a_range_read_s_items_come_back_from_the_read_process_as_they_were_read(process):
    items = list(process.read(_range(ITEMS)))

    assert [(i.key, i.kind, i.count, i.ts_ms) for i in items] == [((5, 0, 0), CHANGES, 3, 1234),
                                                                  ((6, 0, 0), DDL, 1, 99), ((0, 0, 0), PIECE, 0, 0)]
    assert items[0].item.table_id == TableId("db", "t") and items[0].item.data.equals(_changes().data)
    assert items[1].item == {"ddl": "ALTER TABLE t ADD c INT"}
    assert items[2].item == PieceRead("a", "b", 1.0, 0.1, 0.2, 3)


def test_range_reads_run_in_the_read_process_and_other_reads_in_the_driver(process):
    there = _pid_there(process)
    here = next(iter(process.read(GapRead(None, 1)))).item  # type: ignore[arg-type]

    assert there == process.pid != os.getpid() and here == os.getpid()


def test_a_read_s_error_is_raised_in_the_driver_with_the_read_process_s_traceback(process):
    got = []
    with pytest.raises(ConfigurationError, match="fix its grants") as raised:
        for item in process.read(_range(FAILS)):
            got.append(item.item)

    assert got == ["before"]
    note = raised.value.__notes__[0]
    assert note.startswith("raised in the stream's read process:\nTraceback") and "test_read_process.py" in note


def test_the_read_process_reads_on_after_a_read_s_error(process):
    before = process.pid
    with pytest.raises(ConfigurationError):
        list(process.read(_range(FAILS)))

    assert _pid_there(process) == before


def test_an_error_whose_type_does_not_pickle_arrives_as_its_words(process):
    with pytest.raises(InternalError, match="Unpicklable: a type of its own"):
        list(process.read(_range(FAILS_UNPICKLABLE)))


def test_a_read_process_that_dies_mid_read_fails_the_read_and_the_next_read_starts_another(process):
    before = process.pid
    with pytest.raises(SparkJobFailed, match="exit status 7"):
        list(process.read(_range(DIES)))  # what it had not sent yet is lost with it

    assert _pid_there(process) not in (before, None)


def test_a_read_given_up_ends_the_read_process_and_the_next_read_starts_another(process):
    before = process.pid
    items = process.read(_range(MANY))
    assert next(items).key == (1, 0, 0)
    items.close()  # the applier failed: the rest of the read is not wanted

    assert process.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(before, 0)  # ended and reaped
    assert _pid_there(process) != before


def test_a_read_process_started_again_by_a_thread_outlives_that_thread(process):
    def read_ahead() -> None:  # what the driver's read-ahead thread does after a fault
        items = process.read(_range(MANY))
        next(items)
        items.close()
        assert list(process.read(_range(ITEMS)))

    thread = threading.Thread(target=read_ahead)
    thread.start()
    thread.join()
    started_there = process.pid

    assert _pid_there(process) == started_there


def test_the_read_process_s_log_lines_are_logged_by_the_driver(process, caplog):
    with caplog.at_level(logging.INFO):
        assert list(process.read(RangeRead(BinlogOffset("bin.000001", 4), None, BinlogOffset("bin.000042", LOGS),
                                           1, 1, {}))) == []

    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name == "mysqlcdc.standin"] == [
        ("mysqlcdc.standin", logging.WARNING, "read bin.000042 in the read process")]


def test_the_read_process_s_settings_are_not_in_its_arguments(process):
    _pid_there(process)  # started: it has answered (its arguments are read once its program runs)
    with open(f"/proc/{process.pid}/cmdline", "rb") as cmdline:
        arguments = cmdline.read()

    assert b"read_process" in arguments and b"s3cr3t" not in arguments


def test_the_read_process_ends_when_its_driver_is_killed_minus_9(tmp_path):
    driver = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from tests.unit.stream.test_read_process import ReadProcess, StandIn\n"
         "reading = ReadProcess(StandIn())\n"
         "print(reading.pid, flush=True)\n"
         "time.sleep(3600)\n"],
        stdout=subprocess.PIPE, cwd=os.getcwd(), env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
    assert driver.stdout is not None
    child = int(driver.stdout.readline())
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()

    deadline = time.monotonic() + 120  # the event: the read process is gone (a busy machine may take a while)
    while _alive(child):
        assert time.monotonic() < deadline, f"the read process {child} outlived its driver"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False
