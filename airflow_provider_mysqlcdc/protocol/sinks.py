"""Which sink a pipeline writes, as its job files and operators name it: the table format, and for
Iceberg the namespace template of its tables (sinks/factory.py opens it, sinks/iceberg/catalog.py
names the tables). Checked where they are given, so a wrong one fails the DAG's parse."""

from __future__ import annotations

import string

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError

#: the table formats a pipeline can write, the default first
SINK_FORMATS = ("delta", "iceberg")
#: the default namespace template: a table's namespace is its source database
DEFAULT_NAMESPACE = "{database}"


def check_sink_format(sink_format: str) -> str:
    if sink_format not in SINK_FORMATS:
        raise ConfigurationError(f"unknown sink format {sink_format!r}: choose one of {', '.join(SINK_FORMATS)}")
    return sink_format


def check_namespace(template: str) -> str:
    """``template`` when it is a namespace template, else the error with the fix."""
    fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    if not template.strip() or any(name != "database" for name in fields):
        raise ConfigurationError(f"iceberg_namespace must be a namespace, optionally holding {{database}} (the source "
                                 f"table's database), e.g. '{{database}}' or 'lake_{{database}}'; got {template!r}.")
    return template
