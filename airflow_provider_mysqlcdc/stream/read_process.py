"""The driver loop's binlog reads in a process of their own (``ReadProcess``), so that decoding and
merging run at once.

In one process the reads' decoding (Python: framing, rows, Arrow columns) holds the interpreter
while the merges beside it (delta-rs, pyiceberg, Arrow) wait for it: a 500k-change catch-up merged
five times slower beside its reads than alone. The read process is one long-lived child of the
stream's driver, started with the loop and ended with it: the loop sends it each range read of a
batch (``RangeRead``, stream/batches.py), it runs the read with its own ``BinlogReading``
(reading.py) and sends the items back as they come, a run of changes as Arrow IPC, a marker
pickled (reading.py ``item_payload``), while the driver applies the items before them. An
activation or a purge gap is read in the driver as before: its items change what the next reads
find, so they are read as they are applied.

Nothing changes for exactly-once: the items are the same, in the same order, applied by the same
applier. Between the two processes go length-prefixed pickled frames over two pipes: the driver's
settings and each request one way; the items, the read's end, its error (raised again in the
driver, the read process's traceback as its note) and its log records the other way. Memory is
bounded by the pipe and the driver's read-ahead (loop.py ``ReadAhead``): a read process that is
ahead waits for its pipe.

Faults: a read the driver gives up (its applier failed) ends the read process, and the next read
starts a new one; a read process that ends without finishing its read fails the batch with its exit
status; the read process ends with the driver, even after a kill -9 (it watches its parent). Its
settings (the source's password among them) go through the pipe, never its arguments.
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import IO, Any, Protocol

from airflow_provider_mysqlcdc.cdc.errors import InternalError, SparkJobFailed
from airflow_provider_mysqlcdc.stream.batches import BatchRead, RangeRead
from airflow_provider_mysqlcdc.stream.reading import ReadItem, item_of, item_payload

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
#: the pipes' buffers: a read's items pass in a few large writes
_BUFFER = 1 << 20
#: what the read process sends: an item, its read's end, its read's error, a log record
ITEM, END, ERROR, LOG = "item", "end", "error", "log"
#: how long the read process has to end once asked (its pipe closed) before it is killed
_END_GRACE_S = 10.0
#: how often the read process looks whether its driver is still there
_WATCH_S = 0.5


class Reading(Protocol):
    """What reads a batch's reads (reading.py ``BinlogReading``): pickled into the read process."""

    def read(self, read: BatchRead) -> Iterator[ReadItem]: ...


def write_frame(out: IO[bytes], message: Any) -> None:
    write_pickled(out, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def write_pickled(out: IO[bytes], data: bytes) -> None:
    """A frame of what is pickled already."""
    out.write(_LENGTH.pack(len(data)))
    out.write(data)


def read_frame(inp: IO[bytes]) -> Any | None:
    """The next frame, or None where the pipe ended (before a whole frame)."""
    head = inp.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = inp.read(size)
    return pickle.loads(data) if len(data) == size else None


class ReadProcess:
    """Runs ``reading``'s range reads in the read process (see the module doc), the other reads here.
    The process starts at once (it imports the reading code while the loop prepares) and again after
    it ended; ``close`` ends it."""

    def __init__(self, reading: Reading):
        self.reading = reading
        self._process: subprocess.Popen | None = None
        self._requests: IO[bytes] | None = None
        self._replies: IO[bytes] | None = None
        self._start()

    def read(self, read: BatchRead) -> Iterator[ReadItem]:
        """The items of one of a batch's reads, in the read process where it is a range."""
        if not isinstance(read, RangeRead):
            return self.reading.read(read)
        return self._read_there(read)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _start(self) -> None:
        settings = pickle.dumps(self.reading, protocol=pickle.HIGHEST_PROTOCOL)  # refused before a process starts
        to_child, requests = os.pipe()
        replies, from_child = os.pipe()
        # the child finds the provider where this process does (a spark-submit's --py-files zip too)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(to_child), str(from_child), str(os.getpid())],
                pass_fds=(to_child, from_child), env=env, stdin=subprocess.DEVNULL, close_fds=True)
        finally:
            os.close(to_child)
            os.close(from_child)
        self._requests = os.fdopen(requests, "wb", buffering=_BUFFER)
        self._replies = os.fdopen(replies, "rb", buffering=_BUFFER)
        write_pickled(self._requests, settings)  # the read process's first frame
        self._requests.flush()
        log.info("the stream's reads run in process %d beside the driver's merges", self._process.pid)

    def _read_there(self, read: RangeRead) -> Iterator[ReadItem]:
        if self._process is None:
            self._start()
        assert self._requests is not None and self._replies is not None
        finished = False
        try:
            try:
                write_frame(self._requests, read)
                self._requests.flush()
            except BrokenPipeError:
                pass  # it ended: said below, where its replies end
            while True:
                message = read_frame(self._replies)
                if message is None:
                    raise SparkJobFailed(f"the stream's read process ended (exit status {self._exit_status()}) "
                                           f"before it finished reading {read.read_from} to {read.end}; the stream "
                                           "resumes from its last batch when restarted")
                tag = message[0]
                if tag == ITEM:
                    _, kind, key, count, ts_ms, payload = message
                    yield ReadItem(key, kind, item_of(kind, payload), count, ts_ms)
                elif tag == LOG:
                    _, name, level, text = message
                    logging.getLogger(name).log(level, "%s", text)
                elif tag == END:
                    finished = True
                    return
                else:
                    finished = True
                    raise message[1]
        finally:
            if not finished:  # given up, or the process failed: a new one for the next read
                self._end(kill=True)

    def _exit_status(self) -> str:
        assert self._process is not None
        try:
            code = self._process.wait(_END_GRACE_S)
        except subprocess.TimeoutExpired:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else str(code)

    def close(self) -> None:
        """End the read process (it ends when its requests end)."""
        self._end(kill=False)

    def _end(self, *, kill: bool) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if kill:
            process.kill()
        for pipe in (self._requests, self._replies):
            try:
                pipe.close()  # type: ignore[union-attr]
            except OSError:
                pass
        try:
            process.wait(_END_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class _Replies:
    """The read process's side of its replies: whole frames, whichever thread sends one."""

    def __init__(self, out: IO[bytes]):
        self.out = out
        self.lock = threading.Lock()

    def send(self, message: Any, *, flush: bool = False) -> None:
        with self.lock:
            write_frame(self.out, message)
            if flush:
                self.out.flush()


class _Forward(logging.Handler):
    """The read process's log records, sent to the driver, which logs them where its own go."""

    def __init__(self, replies: _Replies):
        super().__init__()
        self.replies = replies

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.replies.send((LOG, record.name, record.levelno, self.format(record)))
        except Exception:  # noqa: BLE001 - a log line never fails a read
            self.handleError(record)


def _end_with_parent(parent: int) -> None:
    """This process ends soon after the driver ends, however it ends (a kill -9 too). Not with
    ``PR_SET_PDEATHSIG``: prctl(2) documents that signal as sent when the *thread* that started this
    process ends, and a read process started again after a fault is started by the driver's
    read-ahead thread, which ends with its batch."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_S)
        os._exit(0)

    threading.Thread(target=watch, name="mysqlcdc-driver-watch", daemon=True).start()


def _sendable(exc: BaseException) -> BaseException:
    """``exc`` as the driver can unpickle it, with this process's traceback as its note."""
    exc.add_note("raised in the stream's read process:\n" + "".join(traceback.format_exception(exc)).rstrip())
    try:
        pickle.loads(pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL))
        return exc
    except Exception:  # noqa: BLE001 - an error whose type does not pickle: its words
        plain = InternalError(f"{type(exc).__name__}: {exc}")
        for note in getattr(exc, "__notes__", []):
            plain.add_note(note)
        return plain


#: allocations between the read process's young-generation collections (Python's default: 700)
YOUNG_COLLECTION = 10_000


def fewer_collections() -> None:
    """Collect garbage less often in the read process. Decoding allocates a few objects per change,
    nearly all freed by reference counting at once, so the collector's default pace (a young
    collection every 700 allocations, each also scanning what survived) was about a fifth of a
    read's CPU; what is loaded once the reading arrives (modules, settings) is frozen out of every
    collection. Cycles are still collected, only later."""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION, *gc.get_threshold()[1:])


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The read process: the reading from the first frame, then one read per request until the
    requests end."""
    replies = _Replies(out)
    logging.basicConfig(level=logging.INFO, handlers=[_Forward(replies)], format="%(message)s", force=True)
    reading = read_frame(inp)
    if reading is None:
        return
    fewer_collections()
    while (request := read_frame(inp)) is not None:
        try:
            for item in reading.read(request):
                replies.send((ITEM, item.kind, item.key, item.count, item.ts_ms, item_payload(item)))
            replies.send((END,), flush=True)
        except Exception as exc:  # noqa: BLE001 - raised again in the driver
            replies.send((ERROR, _sendable(exc)), flush=True)


def main(argv: list[str]) -> None:
    inp_fd, out_fd, parent = (int(a) for a in argv)
    _end_with_parent(parent)
    try:
        serve(os.fdopen(inp_fd, "rb", buffering=_BUFFER), os.fdopen(out_fd, "wb", buffering=_BUFFER))
    except BrokenPipeError:  # the driver gave up the read, or ended
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
