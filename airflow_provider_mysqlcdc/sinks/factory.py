"""The one way to open a sink: from the lake's location, the object store's options and the table
format. Nothing outside ``sinks/`` names a format's class, so a second format is added here and in
its own module, not at every caller."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.sinks.base import Sink

#: the table formats a pipeline can write, the default first
SINK_FORMATS = ("delta",)


def open_sink(root: str, storage_options: dict[str, str] | None = None, *, sink_format: str = "delta") -> Sink:
    """The sink whose tables live under ``root`` (a local path or an object store URL), reached with
    ``storage_options`` (an object store's credentials and settings, as delta-rs takes them)."""
    if sink_format == "delta":
        from airflow_provider_mysqlcdc.sinks.delta import DeltaSink

        return DeltaSink(root, storage_options)
    raise ConfigurationError(f"unknown sink format {sink_format!r}: choose one of {', '.join(SINK_FORMATS)}")
