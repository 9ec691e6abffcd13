"""The hook for the ``mysqlcdc`` connection type: the MySQL/MariaDB source a pipeline captures."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from airflow_provider_mysqlcdc.cdc.errors import CdcError, ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig, parse_server_id_range
from airflow_provider_mysqlcdc.cdc.source.server import current_offset, server_info
from airflow_provider_mysqlcdc.planning.planner import Planner
from airflow_provider_mysqlcdc.state.registry import PipelineState

DEFAULT_RETRY_BUDGET_S = 300.0


class MySqlCdcHook(BaseHook):
    """Turns an Airflow connection into the core's ``SourceConfig`` (the password stays in memory)."""

    conn_name_attr = "mysqlcdc_conn_id"
    default_conn_name = "mysqlcdc_default"
    conn_type = "mysqlcdc"
    hook_name = "MySQL CDC source"

    def __init__(self, mysqlcdc_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mysqlcdc_conn_id = mysqlcdc_conn_id

    def _extra(self, extras: dict[str, Any], name: str) -> Any:
        # the UI stores conn-fields either bare or as extra__mysqlcdc__<name>
        return extras.get(name, extras.get(f"extra__{self.conn_type}__{name}"))

    def source_config(self) -> SourceConfig:
        conn = self.get_connection(self.mysqlcdc_conn_id)
        extras = conn.extra_dejson
        ssl = None
        if self._extra(extras, "ssl_ca"):
            ssl = {"ca": self._extra(extras, "ssl_ca")}
            for name, key in (("ssl_cert", "cert"), ("ssl_key", "key")):
                if self._extra(extras, name):
                    ssl[key] = self._extra(extras, name)
            verify = self._extra(extras, "ssl_verify_identity")
            # JSON extras may hold the flag as text: only an explicit false turns the check off
            ssl["check_hostname"] = str(verify).strip().lower() not in ("false", "0", "no", "off")
        if not conn.host:
            raise ConfigurationError(f"Connection {self.mysqlcdc_conn_id!r} has no host: set the source server's host.")
        salt = str(self._extra(extras, "mask_salt") or "")
        if salt:
            mask_secret(salt)  # a secret like the password: never shown in a log
        return SourceConfig(host=conn.host, port=int(conn.port or 3306), user=conn.login or "",
                            password=conn.password or "", database=conn.schema or None, ssl=ssl, mask_salt=salt)

    def planner(self, state: PipelineState, *, log: Any = None) -> Planner:
        """What a plan task decides, against this connection's server (planning/planner.py)."""
        return Planner(self.source_config(), state, log)

    def retry_budget_s(self) -> float:
        """How long the Spark jobs ride out a source outage (extra ``retry_budget_s``, default 300 s).
        Planning does not retry: a wrong host fails it at once."""
        value = self._extra(self.get_connection(self.mysqlcdc_conn_id).extra_dejson, "retry_budget_s")
        try:
            budget = DEFAULT_RETRY_BUDGET_S if value in (None, "") else float(value)
        except (TypeError, ValueError):
            budget = -1.0
        if budget < 0:
            raise ConfigurationError(f"Malformed retry_budget_s {value!r} in connection {self.mysqlcdc_conn_id!r}: "
                                     "give a number of seconds >= 0 (0: fail at the first fault).")
        return budget

    def server_id_range(self) -> tuple[int, int]:
        return parse_server_id_range(self._extra(self.get_connection(self.mysqlcdc_conn_id).extra_dejson,
                                                 "server_id_range"))

    def test_connection(self) -> tuple[bool, str]:
        """Used by the UI's Test button: connect, and read the binlog position."""
        try:
            conn = self.source_config().connect()
            try:
                info = server_info(conn)
                offset = current_offset(conn, info)
            finally:
                conn.close()
        except (CdcError, Exception) as exc:  # the UI shows the message
            return False, str(exc)
        return True, f"Connected to {info.version}; binlog at {offset}"
