"""How a Spark program and the process that launched it talk: a report folder.

The folder is a local path or an fsspec URL, usually under the pipeline's state location, so the
driver may run wherever that location is reachable: on the task's machine (client deploy mode) or
on the cluster (cluster deploy mode). Nothing travels on the driver's stdout.

    job.json          the job (written by the caller; it holds no secret)
    driver.json       DriverInfo: application id, Spark UI address, host and pid of the driver
    log/<n>.json      DriverLog: our log lines, in order, flushed about once a second
    result.json       the job's result (its own record), written last
    failure.json      JobFailure: what went wrong, in the job's own words
    stop.json         StopRequest: the caller asks a long-running program (the stream) to stop

The driver side is ``JobReport``; the caller follows the folder with ``ReportWatcher``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.protocol.lease import StopRequest
from airflow_provider_mysqlcdc.protocol.results import DriverInfo, DriverLog, JobFailure
from airflow_provider_mysqlcdc.state.storage import StateStorage

JOB, DRIVER, LOG, RESULT, FAILURE, STOP = "job.json", "driver.json", "log", "result.json", "failure.json", "stop.json"
#: loggers whose INFO lines are the job's progress (rows read, splits done, batches, lag)
PROGRESS_LOGGER = "airflow_provider_mysqlcdc"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JobReport:
    """The driver's side: the job's log lines, its driver, and finally its result or failure."""

    def __init__(self, folder: str, flush_interval_s: float = 1.0):
        self.storage = StateStorage(folder)
        self.flush_interval_s = flush_interval_s
        self._lines: list[str] = []
        self._lock = threading.Lock()  # the lines the handler appends
        self._flushing = threading.Lock()  # one flush at a time: numbered files in the order of their lines
        self._sequence = 0
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_periodically, name="job-report", daemon=True)
        self._handler = _LinesHandler(self._lines, self._lock)

    def read_job(self) -> str:
        return self.storage.read_text(JOB)

    def __enter__(self) -> "JobReport":
        self._handler.setFormatter(logging.Formatter(LOG_FORMAT))
        self._handler.setLevel(logging.INFO)
        logger = logging.getLogger(PROGRESS_LOGGER)
        logger.setLevel(logging.INFO)  # progress is INFO, whatever the root logger's level
        logger.addHandler(self._handler)
        self._flusher.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._flusher.join()
        logging.getLogger(PROGRESS_LOGGER).removeHandler(self._handler)
        self.flush()

    def driver_started(self, driver: DriverInfo) -> None:
        """The driver is up (spark/starting.py ``SparkStart.driver``)."""
        self.storage.write_record(driver, DRIVER)

    def succeeded(self, result: dict[str, Any]) -> None:
        self.flush()
        self.storage.write_text(json.dumps(result, sort_keys=True), RESULT)

    def failed(self, exc: BaseException) -> None:
        self.flush()
        self.storage.write_record(JobFailure(type(exc).__name__, str(exc)), FAILURE)

    def flush(self) -> None:
        """Write the lines logged since the last flush (the periodic flusher and the job's end both call it)."""
        with self._flushing:
            with self._lock:
                lines, self._lines[:] = list(self._lines), []
            if lines:
                self._sequence += 1
                self.storage.write_record(DriverLog(lines), LOG, f"{self._sequence:09d}.json")

    def _flush_periodically(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.flush()
            except Exception:  # a storage hiccup must not kill the job; the next flush retries
                logging.getLogger(__name__).warning("could not write the job's log lines", exc_info=True)


class _LinesHandler(logging.Handler):
    def __init__(self, lines: list[str], lines_lock: threading.Lock):
        super().__init__()
        self.lines = lines
        self.lines_lock = lines_lock  # not ``lock``: Handler.handle() holds that one around emit()

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        with self.lines_lock:
            self.lines.append(line)


def stop_request(folder: str) -> StopRequest | None:
    """The program's side of ``ReportWatcher.request_stop``."""
    return ReportWatcher(folder).stop_requested()


class ReportWatcher:
    """The caller's side: follow a report folder while the job runs, then read how it ended."""

    def __init__(self, folder: str, storage_options: dict[str, Any] | None = None):
        self.storage = StateStorage(folder, storage_options)
        self.folder = folder
        self.driver: DriverInfo | None = None

    def write_job(self, job_json: str) -> None:
        """Put the job in the folder, where the program reads it when given no ``--job``."""
        self.storage.write_text(job_json, JOB)

    def poll(self, on_line: Callable[[str], None], on_driver: Callable[[DriverInfo], None] | None = None) -> None:
        """Hand new log lines to ``on_line`` (each once, in order) and the driver, once, to ``on_driver``."""
        if self.driver is None:
            self.driver = self.storage.read_record(DriverInfo, DRIVER)
            if self.driver is not None and on_driver:
                on_driver(self.driver)
        for name in self.storage.list_names(LOG):
            if name.endswith(".json"):
                log = self.storage.read_record(DriverLog, LOG, name)
                for line in log.lines if log else ():
                    on_line(line)
                self.storage.fs.rm(self.storage.path(LOG, name))

    def follow(self, stop: threading.Event, on_line: Callable[[str], None],
               on_driver: Callable[[DriverInfo], None] | None = None, interval_s: float = 1.0) -> None:
        """``poll`` until ``stop`` is set, then once more (a thread's body while the job runs)."""
        while not stop.wait(interval_s):
            try:
                self.poll(on_line, on_driver)
            except Exception as exc:  # a half-written or vanished file: the next poll sees it whole
                on_line(f"(could not read the job's report folder {self.folder}: {exc})")
        self.poll(on_line, on_driver)

    def failure(self) -> JobFailure | None:
        return self.storage.read_record(JobFailure, FAILURE)

    def result(self) -> dict[str, Any] | None:
        return json.loads(self.storage.read_text(RESULT)) if self.storage.exists(RESULT) else None

    def request_stop(self, reason: str) -> None:
        """Ask the program to stop (the stream looks for this every second, from its start)."""
        self.storage.write_record(StopRequest(reason, time.time()), STOP)

    def stop_requested(self) -> StopRequest | None:
        """Whether someone asked the program to stop, and why."""
        return self.storage.read_record(StopRequest, STOP)

    def remove(self) -> None:
        if self.storage.fs.exists(self.storage.root):
            self.storage.fs.rm(self.storage.root, recursive=True)

