"""Arguments the operators share and check the same way."""

from __future__ import annotations

import ast
import json
import warnings
from typing import Any

from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.selection import TablePattern, entry_text, parse_entries
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import check_sink_spec


def state_location_of(state_location: str | None, state: str | None, operator: str) -> str:
    """The pipeline's state location, given as ``state_location``, or as ``state`` (its old name,
    accepted with a deprecation warning for one more release)."""
    if state is not None:
        if state_location is not None:
            raise TypeError(f"{operator} got both state_location and state (its old name): give state_location only.")
        warnings.warn(f"{operator}: the argument 'state' is renamed 'state_location'; 'state' stops working in the "
                      "next release.", AirflowProviderDeprecationWarning, stacklevel=3)
        return state
    if state_location is None:
        raise TypeError(f"{operator} needs state_location: the pipeline's state location (a path or URL).")
    return state_location


def native(value: Any) -> Any:
    """A rendered template back to a Python value ('None', "['a']", '{"a": 1}', '12')."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text in ("", "None", "null"):
        return None
    if text[0] in "[{" or text.lstrip("-").isdigit():
        try:
            return json.loads(text)
        except ValueError:
            try:
                return ast.literal_eval(text)
            except (ValueError, SyntaxError) as exc:
                raise ConfigurationError(f"Malformed parameter value {value!r}.") from exc
    return value


def table_entries(entries: Any, what: str = "tables") -> list[str]:
    """Table entries (a list, a comma-separated string or a rendered list) as the texts that read back
    as them (cdc/source/selection.py)."""
    return [entry_text(e) for e in parse_entries(native(entries), what)]


def table_patterns(entries: Any) -> list[str]:
    """The patterns among table entries (a list, a comma-separated string or a rendered list; names
    left out), as given (cdc/source/selection.py)."""
    return [e.text for e in parse_entries(native(entries), "tables") if isinstance(e, TablePattern)]


def sink_spec_of(sink_root: str, sink_format: str, iceberg_namespace: str, iceberg_catalog_conn_id: str | None,
                 merge_mode: str | None = None, merge_modes: Any = None) -> SinkSpec:
    """The ``SinkSpec`` the operators' sink arguments name (protocol/sinks.py), refused when its format
    is unknown, its namespace malformed or a merge mode (``merge_modes``: per table) not the format's."""
    return check_sink_spec(SinkSpec(sink_root, sink_format, iceberg_namespace, iceberg_catalog_conn_id,
                                    native(merge_mode), native(merge_modes) or ()))


def sink_arguments(spec: SinkSpec) -> dict[str, Any]:
    """The operators' sink arguments naming ``spec`` (``sink_spec_of`` reads them back)."""
    return {"sink_root": spec.root, "sink_format": spec.format, "iceberg_namespace": spec.namespace,
            "iceberg_catalog_conn_id": spec.catalog_conn_id, "merge_mode": spec.merge_mode,
            "merge_modes": dict(spec.table_merge_modes) or None}
