"""Which framing cuts the binlog into events (cdc/binlog/framing.py), decided before anything is read."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.framing import FRAMING_VARIABLE, DumpFraming, chosen_framing
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, LibraryNeeded
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.source import tls
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig

START = BinlogOffset("binlog.000001", 4)


@pytest.fixture(autouse=True)
def _no_remembered_servers():
    tls.forget_servers()
    yield
    tls.forget_servers()


def _dump(source: SourceConfig) -> DumpFraming:
    return DumpFraming(source, START, server_id=7, follow=False, heartbeat_s=1.0, tables=None)


def test_the_default_framing_is_auto_and_the_environment_can_choose_the_library(monkeypatch):
    monkeypatch.delenv(FRAMING_VARIABLE, raising=False)
    assert chosen_framing() == "auto"
    monkeypatch.setenv(FRAMING_VARIABLE, " Library ")
    assert chosen_framing() == "library"
    assert chosen_framing("auto") == "auto"  # an explicit choice wins over the environment


def test_an_unknown_framing_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv(FRAMING_VARIABLE, "fast")
    with pytest.raises(ConfigurationError, match="'fast' names no binlog framing; use one of auto, library"):
        chosen_framing()


def test_our_framing_leaves_a_source_with_tls_settings_to_the_library():
    with pytest.raises(LibraryNeeded, match="settings name TLS"):
        _dump(SourceConfig(host="db.example", port=3306, ssl={"ca": "/etc/ca.pem"}))


def test_our_framing_leaves_a_server_that_offers_tls_to_the_library():
    source = SourceConfig(host="db.example", port=3306)
    tls._remember(source.host, source.port, True)
    with pytest.raises(LibraryNeeded, match="offers TLS"):
        _dump(source)
    tls._remember(source.host, source.port, False)
    _dump(source)  # plaintext: ours (no connection is made before events() is read)


def test_our_framing_asks_a_server_whose_tls_offer_is_not_known(monkeypatch):
    """A reader reconnecting after what the process knew expired: one connection finds out, rather
    than leaving the rest of the read to the library."""
    source = SourceConfig(host="db.example", port=3306)

    class Probe:
        def close(self) -> None:
            pass

    def connect(self, **_):
        tls._remember(self.host, self.port, False)  # what connect_preferring_tls remembers of this server
        return Probe()

    monkeypatch.setattr(SourceConfig, "connect", connect)
    _dump(source)
    assert tls.offers_tls(source.host, source.port) is False
