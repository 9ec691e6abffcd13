"""The decisions of cdc/source/tls.py (TLS where the server offers it, one context per process) on the
answers a server gives: what is remembered, and when it is found out again."""

from __future__ import annotations

import pymysql
import pytest

from airflow_provider_mysqlcdc.cdc.source import tls
from airflow_provider_mysqlcdc.cdc.source.tls import connect_preferring_tls, forget_servers, replication_tls

HOST, PORT = "db.example", 3306


class Server:
    """Answers connection attempts as a server that does or does not offer TLS, and records them."""

    def __init__(self, offers_tls: bool, requires_tls: bool = False, reachable: bool = True):
        self.offers_tls, self.requires_tls, self.reachable = offers_tls, requires_tls, reachable
        self.attempts: list[str] = []

    def connect(self, arguments: dict) -> str:
        kind = "tls" if arguments.get("ssl") is not None else "plain"
        self.attempts.append(kind)
        if not self.reachable:
            raise pymysql.err.OperationalError(2003, "Can't connect to MySQL server")
        if kind == "tls" and not self.offers_tls:
            raise pymysql.err.OperationalError(tls.NO_TLS_OFFERED, "SSL is required but the server doesn't support it")
        if kind == "plain" and self.requires_tls:
            raise pymysql.err.OperationalError(1045, "Access denied")
        return kind


@pytest.fixture(autouse=True)
def clean():
    forget_servers()
    yield
    forget_servers()


def test_a_server_offering_tls_is_reached_over_tls_with_the_one_context():
    server = Server(offers_tls=True)
    assert connect_preferring_tls(HOST, PORT, server.connect) == "tls"
    assert connect_preferring_tls(HOST, PORT, server.connect) == "tls"
    assert server.attempts == ["tls", "tls"]
    assert replication_tls(HOST, PORT) == {"ssl": tls.preferred_context()}


def test_a_server_without_tls_is_found_out_once_then_reached_in_plaintext():
    server = Server(offers_tls=False)
    assert connect_preferring_tls(HOST, PORT, server.connect) == "plain"
    assert connect_preferring_tls(HOST, PORT, server.connect) == "plain"
    assert server.attempts == ["tls", "plain", "plain"]
    assert replication_tls(HOST, PORT) == {"ssl_disabled": True}


def test_a_server_that_starts_requiring_tls_is_found_out_again():
    server = Server(offers_tls=False)
    connect_preferring_tls(HOST, PORT, server.connect)
    server.offers_tls = server.requires_tls = True  # a failover behind the same name
    assert connect_preferring_tls(HOST, PORT, server.connect) == "tls"
    assert replication_tls(HOST, PORT) == {"ssl": tls.preferred_context()}


def test_a_server_that_stops_offering_tls_is_found_out_again():
    server = Server(offers_tls=True)
    connect_preferring_tls(HOST, PORT, server.connect)
    server.offers_tls = False
    assert connect_preferring_tls(HOST, PORT, server.connect) == "plain"
    assert replication_tls(HOST, PORT) == {"ssl_disabled": True}


def test_an_unreachable_server_is_one_attempt_and_what_it_offered_is_kept():
    server = Server(offers_tls=True)
    connect_preferring_tls(HOST, PORT, server.connect)
    server.reachable = False
    with pytest.raises(pymysql.err.OperationalError):
        connect_preferring_tls(HOST, PORT, server.connect)
    assert server.attempts == ["tls", "tls"]
    assert replication_tls(HOST, PORT) == {"ssl": tls.preferred_context()}


def test_what_a_server_offered_is_forgotten_after_a_while(monkeypatch):
    server = Server(offers_tls=False)
    connect_preferring_tls(HOST, PORT, server.connect)
    monkeypatch.setattr(tls, "REMEMBERED_S", -1.0)
    assert replication_tls(HOST, PORT) == {}  # unknown again: the library's own preferred mode
