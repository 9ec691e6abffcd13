"""TLS of a source connection whose settings name none: encrypted when the server offers it, as
pymysql's own "preferred" mode, without paying that mode's cost on every connection.

Given no TLS settings, pymysql builds a new TLS context for every connection (Python's default one,
which loads the system's CA certificates: about 25 ms of CPU) and then checks no certificate with
it. A micro-batch of the stream opens about ten connections (the driver's offsets, the planner's
listing, each decoding task's reader), so that was a quarter of a second of CPU a batch. Here the
same context is built once per process and handed to pymysql, which then requires TLS: a server
that offers none refuses it ("SSL is required"), and is reached in plaintext, as the preferred
mode would. What a server offers is remembered for ``REMEMBERED_S`` (a process opens connections
in bursts; the failed attempt costs the server an aborted handshake), and forgotten at once when a
connection made by it fails: a server that changed (a failover behind the same name) is found out
again. Like the preferred mode, this does not resist an attacker who strips TLS from the handshake;
settings that name TLS (``SourceConfig.ssl``) are pymysql's as given: verified, and required.
"""

from __future__ import annotations

import functools
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pymysql
from pymysql.constants import CR

T = TypeVar("T")

#: pymysql's error when a TLS context is given and the server offers no TLS (CR_SSL_CONNECTION_ERROR)
NO_TLS_OFFERED = CR.CR_SSL_CONNECTION_ERROR

#: pymysql's errors for a server that did not answer (can't connect, unknown host, lost): not its TLS
UNREACHABLE = (CR.CR_CONN_HOST_ERROR, CR.CR_UNKNOWN_HOST, CR.CR_SERVER_LOST)

_lock = threading.Lock()
#: how long what a server offered is remembered (seconds)
REMEMBERED_S = 60.0
#: per server (host, port): whether it offered TLS, and when this process found out
_offers_tls: dict[tuple[str, int], tuple[bool, float]] = {}


@functools.lru_cache(maxsize=1)
def preferred_context() -> ssl.SSLContext:
    """The context pymysql's preferred mode builds: encryption, no certificate or host name checked."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _remembered(host: str, port: int) -> bool | None:
    with _lock:
        found = _offers_tls.get((host, port))
    return None if found is None or time.monotonic() - found[1] > REMEMBERED_S else found[0]


def _remember(host: str, port: int, offered: bool | None) -> None:
    with _lock:
        if offered is None:
            _offers_tls.pop((host, port), None)
        else:
            _offers_tls[(host, port)] = (offered, time.monotonic())


def _arguments(offered: bool) -> dict[str, Any]:
    return {"ssl": preferred_context()} if offered else {"ssl_disabled": True}


def connect_preferring_tls(host: str, port: int, connect: Callable[[dict[str, Any]], T]) -> T:
    """``connect(tls_arguments)`` to a server at ``host:port`` for which no TLS is configured: over
    TLS when it offers it, else in plaintext."""
    offered = _remembered(host, port)
    if offered is not None:
        try:
            return connect(_arguments(offered))
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] in UNREACHABLE:
                raise  # no server answered: nothing to find out about it
            _remember(host, port, None)  # the server may have changed: found out again below
    try:
        conn = connect(_arguments(True))
    except pymysql.err.OperationalError as exc:
        if not (exc.args and exc.args[0] == NO_TLS_OFFERED):
            raise
        _remember(host, port, False)
        return connect(_arguments(False))
    _remember(host, port, True)
    return conn


def offers_tls(host: str, port: int) -> bool | None:
    """Whether the server at ``host:port`` offered TLS to a connection of this process lately (None:
    not known)."""
    return _remembered(host, port)


def replication_tls(host: str, port: int) -> dict[str, Any]:
    """The TLS arguments for python-mysql-replication's connections to a server for which no TLS is
    configured (the library hands them to pymysql): what the server offered to a connection of this
    process (a reader makes one before the library's), else none: pymysql's own preferred mode."""
    offered = offers_tls(host, port)
    return {} if offered is None else _arguments(offered)


def forget_servers() -> None:
    """Forget what every server offered (a test's clean start)."""
    with _lock:
        _offers_tls.clear()
