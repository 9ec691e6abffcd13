"""Preflight's judgement of the server's binlog settings (the variables as a MySQL 8 server reports them)."""

from airflow_provider_mysqlcdc.cdc.source.preflight import SERVER_VARIABLES, server_problems
from airflow_provider_mysqlcdc.cdc.source.server import ServerInfo

MYSQL_8 = ServerInfo("8.0.36", is_mariadb=False, major=8, minor=0)
GOOD = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL",
        "binlog_transaction_compression": "OFF", "log_bin_compress": None, "binlog_row_value_options": ""}


def test_a_server_ready_for_cdc_has_no_problem():
    assert set(GOOD) == set(SERVER_VARIABLES)
    assert server_problems(GOOD, MYSQL_8) == []


def test_partial_json_updates_are_refused_with_the_fix():
    [problem] = server_problems({**GOOD, "binlog_row_value_options": "PARTIAL_JSON"}, MYSQL_8)
    assert "binlog_row_value_options is PARTIAL_JSON" in problem
    assert "SET GLOBAL binlog_row_value_options=''" in problem


def test_a_mariadb_server_without_the_setting_is_fine():
    mariadb = ServerInfo("10.11.6-MariaDB", is_mariadb=True, major=10, minor=11)
    assert server_problems({**GOOD, "binlog_row_value_options": None}, mariadb) == []
