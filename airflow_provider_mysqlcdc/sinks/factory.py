"""The one way to open a sink: from the pipeline's ``SinkSpec`` and the object store's options.

The registry below names each table format's ``SinkFormat`` (sinks/base.py) by its module, imported
when the format is first asked for, so a lake of one format never imports another format's library.
A third format is its own package under ``sinks/`` and one line here: nothing outside ``sinks/``
names a format.
"""

from __future__ import annotations

import importlib

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.base import Sink, SinkFormat

__all__ = ["SINK_FORMATS", "check_sink_spec", "open_sink", "sink_format"]

#: the registry: each table format's name and the module whose ``FORMAT`` it is, the default first
SINK_FORMATS: dict[str, str] = {
    "delta": "airflow_provider_mysqlcdc.sinks.delta.format",
    "iceberg": "airflow_provider_mysqlcdc.sinks.iceberg.format",
}


def check_sink_spec(spec: SinkSpec) -> SinkSpec:
    """``spec`` when the factory knows its format and the format its merge mode, else the error naming
    the formats (or the modes) there are."""
    if spec.format not in SINK_FORMATS:
        raise ConfigurationError(f"unknown sink format {spec.format!r}: choose one of {', '.join(SINK_FORMATS)} "
                                 "(sink_format=...).")
    modes = sink_format(spec).merge_modes
    if spec.merge_mode is not None and spec.merge_mode not in modes:
        raise ConfigurationError(f"the {spec.format} sink merges {' or '.join(modes)}, not {spec.merge_mode!r}: "
                                 f"leave merge_mode unset (the format's default) or give one of {', '.join(modes)}.")
    for entry, mode in spec.table_merge_modes:
        if mode not in modes:
            raise ConfigurationError(f"the {spec.format} sink merges {' or '.join(modes)}, not {mode!r} "
                                     f"(merge_modes[{entry!r}]): give one of {', '.join(modes)}.")
    return spec


def sink_format(spec: SinkSpec) -> SinkFormat:
    """The table format of ``spec``."""
    if spec.format not in SINK_FORMATS:
        check_sink_spec(spec)
    format_: SinkFormat = importlib.import_module(SINK_FORMATS[spec.format]).FORMAT
    return format_


def open_sink(spec: SinkSpec, storage_options: dict[str, str] | None = None, *,
              catalog_properties: dict[str, str] | None = None) -> Sink:
    """The sink whose tables ``spec`` places (under ``spec.root``: a local path or an object store URL),
    reached with ``storage_options`` (an object store's credentials and settings, as delta-rs takes
    them). ``catalog_properties``: a catalog's properties for a format that has one (None: those
    installed in this process from ``spec.catalog_conn_id``, or the embedded catalog of a local lake)."""
    return sink_format(check_sink_spec(spec)).open(spec, storage_options, catalog_properties=catalog_properties)
