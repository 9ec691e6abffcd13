"""TLS of a source connection whose settings name none: encrypted when the server offers it, as
pymysql's own "preferred" mode, without paying that mode's cost on every connection.

Given no TLS settings, pymysql builds a new TLS context for every connection (Python's default one,
which loads the system's CA certificates: about 25 ms of CPU) and then checks no certificate with
it. A micro-batch of the stream opens about ten connections (the driver's offsets, the planner's
listing, each decoding task's reader), so that was a quarter of a second of CPU a batch. Here the
same context is built once per process and handed to pymysql; a server that offers no TLS is then
refused by pymysql ("SSL is required"), so it is remembered for the process and reached in
plaintext, exactly what the preferred mode does. Settings that name TLS (``SourceConfig.ssl``) are
pymysql's as given: verified, and required.
"""

from __future__ import annotations

import functools
import ssl
import threading
from typing import Any

import pymysql

#: pymysql's error when a TLS context is given and the server offers no TLS (CR_SSL_CONNECTION_ERROR)
NO_TLS_OFFERED = 2026

_lock = threading.Lock()
#: per server (host, port) whether it offered TLS, as this process found (unknown: not in it)
_offers_tls: dict[tuple[str, int], bool] = {}


@functools.lru_cache(maxsize=1)
def preferred_context() -> ssl.SSLContext:
    """The context pymysql's preferred mode builds: encryption, no certificate or host name checked."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def tls_arguments(host: str, port: int, configured: dict[str, Any] | None, *, try_tls: bool = True
                  ) -> dict[str, Any]:
    """pymysql's TLS keyword arguments for a connection to ``host:port``: the configured settings, or
    the shared preferred context (plaintext for a server this process found without TLS). A server
    not known yet gets the context when ``try_tls`` (the caller handles ``offers_no_tls``), else no
    argument: pymysql's own preferred mode (python-mysql-replication's connections, which a reader
    opens after a connection of its own has found out)."""
    if configured:
        return {"ssl": configured}
    with _lock:
        offers = _offers_tls.get((host, port))
    if offers is None:
        return {"ssl": preferred_context()} if try_tls else {}
    return {"ssl": preferred_context()} if offers else {"ssl_disabled": True}


def found_tls(host: str, port: int, offered: bool) -> None:
    """Remember whether the server at ``host:port`` offered TLS to a connection of this process."""
    with _lock:
        _offers_tls[(host, port)] = offered


def offers_no_tls(exc: BaseException) -> bool:
    """Whether a connection attempt with the preferred context failed because the server offers no TLS."""
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] == NO_TLS_OFFERED
