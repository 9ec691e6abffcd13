"""A program's Spark side while it starts (``SparkStart``): what ``spark/entrypoint.py`` hands a
program's work instead of a finished session.

Under spark-submit the SparkContext takes about 1.5 s to start and the SQL session on top of it
another 1.5-2 s. A program need not wait for either before it reads its job, checks the source and
the sink, takes its lease and starts its read process: ``begin`` starts the context in a thread at
once, and ``session()`` makes the SQL session on first use. The stream's driver engine never uses
one (it reads and merges in this process): it waits for the context only to name its application
(``application()``). A Spark Connect session is finished already (``of``).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_mysqlcdc.protocol.results import DriverInfo
from airflow_provider_mysqlcdc.spark.connect import application_of, is_connect

log = logging.getLogger(__name__)


class SparkStart:
    """The Spark side of a program: a classic SparkContext starting in the background (``begin``), or
    a Spark Connect session (``of``)."""

    def __init__(self, *, app_name: str = "", session: Any = None, connect_url: str = ""):
        self.app_name = app_name
        self.connect_url = connect_url
        self._session = session
        self._context: Any = None
        self._failure: BaseException | None = None
        self._ready: list[Callable[[], None]] = []
        self._failed: list[Callable[[BaseException], None]] = []
        self._lock = threading.Lock()
        self._began = time.monotonic()
        self._thread: threading.Thread | None = None
        self._settled = threading.Event()  # the start ended: a context, or its failure

    @classmethod
    def begin(cls, app_name: str) -> "SparkStart":
        """Start this process's SparkContext (named ``app_name``) in a thread; return at once.
        pyspark is imported here, on the caller's thread: the thread then imports nothing, so it never
        imports a module while the work imports it too (two threads importing pyspark.sql at once can
        meet it partially initialized)."""
        import pyspark.sql  # noqa: F401 - see above

        start = cls(app_name=app_name)
        start._thread = threading.Thread(target=start._start_context, name="mysqlcdc-spark-start", daemon=True)
        start._thread.start()
        return start

    @classmethod
    def of(cls, session: Any, connect_url: str = "") -> "SparkStart":
        """A session that is there already (a Spark Connect session on ``connect_url``)."""
        return cls(session=session, connect_url=connect_url)

    @property
    def connect(self) -> bool:
        """Whether the Spark side is a Spark Connect session (no SparkContext in this process)."""
        return self._session is not None and is_connect(self._session)

    def _start_context(self) -> None:
        from pyspark import SparkConf, SparkContext  # imported already (begin)

        try:
            context = SparkContext.getOrCreate(SparkConf().setAppName(self.app_name))
        except BaseException as exc:  # noqa: BLE001 - raised again where the context is asked for, and by stop
            self._fail(exc)
            return
        with self._lock:
            self._context = context
            ready, self._ready, self._failed = self._ready, [], []
        self._settled.set()
        log.debug("SparkContext started in %.2fs", time.monotonic() - self._began)
        for callback in ready:
            _call(callback)

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self._failure = exc
            failed, self._failed, self._ready = self._failed, [], []
        self._settled.set()
        log.error("the SparkContext did not start: %s", exc)
        for on_failure in failed:
            _call(functools.partial(on_failure, exc))

    def context(self) -> Any:
        """The SparkContext ``begin`` started, once up (raises what stopped it from starting)."""
        if self._thread is not None:
            self._settled.wait()
        if self._failure is not None:
            raise self._failure
        return self._context

    def session(self) -> Any:
        """The SQL session: a Spark Connect session as given, else made on the context on first use."""
        return self._sql_session

    @functools.cached_property
    def _sql_session(self) -> Any:
        if self._session is not None:
            return self._session
        from pyspark.sql import SparkSession

        self.context()
        return SparkSession.builder.appName(self.app_name).getOrCreate()

    def application(self) -> tuple[str, str]:
        """The Spark application id and Spark UI address (waits for the context)."""
        if self._session is not None:
            return application_of(self._session, self.connect_url)
        context = self.context()
        return context.applicationId, context.uiWebUrl or ""

    def driver(self) -> DriverInfo:
        """Where the driver side runs: this process, and the application (and UI) behind it."""
        app_id, ui_url = self.application()
        return DriverInfo(app_id, ui_url, socket.getfqdn(), os.getpid())

    def when_ready(self, callback: Callable[[], None], *,
                   failed: Callable[[BaseException], None] | None = None) -> None:
        """Call ``callback`` once the context (or session) is up: now if it is, else from the thread
        starting it; ``failed`` instead, with the error, when it fails to start. Their errors are
        logged, not raised."""
        with self._lock:
            failure = self._failure
            if self._context is None and self._session is None and failure is None:
                self._ready.append(callback)
                if failed is not None:
                    self._failed.append(failed)
                return
        if failure is None:
            _call(callback)
        elif failed is not None:
            _call(functools.partial(failed, failure))

    def stop(self) -> None:
        """Stop what was started (after the start finished, if it had not). A context that failed to
        start raises its error here, so that a program whose work did not need it still fails."""
        if self._thread is None:
            return  # a session given: its owner stops it
        self._thread.join()
        if "_sql_session" in self.__dict__:
            self._sql_session.stop()
        elif self._context is not None:
            self._context.stop()
        elif self._failure is not None:
            raise self._failure


def _call(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:  # noqa: BLE001 - a report of the driver's address must not fail the start
        log.exception("after the Spark context's start")
