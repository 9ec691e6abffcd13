"""The provider as Airflow sees it: registration, the connection type and the hook, for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError

pytestmark = pytest.mark.integration


def _airflow_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, AIRFLOW_HOME=str(tmp_path / "airflow"), AIRFLOW__CORE__LOAD_EXAMPLES="False", **extra)


def test_airflow_lists_the_provider_and_its_connection_type(tmp_path):
    airflow = str(Path(sys.executable).parent / "airflow")
    env = _airflow_env(tmp_path)
    providers = subprocess.run([airflow, "providers", "list", "--output", "json"], env=env, capture_output=True,
                               text=True, timeout=300)
    assert providers.returncode == 0, providers.stderr[-2000:]
    listed = {p["package_name"]: p for p in json.loads(providers.stdout)}
    assert listed["airflow-provider-mysqlcdc"]["version"] == "0.1.0"
    hooks = subprocess.run([airflow, "providers", "hooks", "--output", "json"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert hooks.returncode == 0, hooks.stderr[-2000:]
    by_type = {h["connection_type"]: h for h in json.loads(hooks.stdout)}
    assert by_type["mysqlcdc"]["class"] == "airflow_provider_mysqlcdc.hooks.mysqlcdc.MySqlCdcHook"


def test_hook_reads_an_airflow_connection_and_tests_it(mysql_server, cdc_user, monkeypatch, tmp_path):
    from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook

    conn = {"conn_type": "mysqlcdc", "host": cdc_user.host, "port": cdc_user.port, "login": cdc_user.user,
            "password": cdc_user.password, "extra": {"server_id_range": "7000-7099"}}
    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_DEFAULT", json.dumps(conn))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    hook = MySqlCdcHook()
    assert hook.source_config() == cdc_user
    assert hook.server_id_range() == (7000, 7099)
    ok, message = hook.test_connection()
    assert ok and "binlog at binlog." in message

    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_DEFAULT", json.dumps({**conn, "password": "wrong"}))
    ok, message = MySqlCdcHook().test_connection()
    assert not ok and "check the user name and password" in message and "wrong" not in message

    monkeypatch.setenv("AIRFLOW_CONN_MYSQLCDC_DEFAULT", json.dumps({**conn, "extra": {"server_id_range": "9-1"}}))
    with pytest.raises(ConfigurationError, match="Malformed server-id range '9-1'"):
        MySqlCdcHook().server_id_range()
