"""Which sink a pipeline writes: one value (``SinkSpec``) the builder makes, the job files carry to
the Spark programs, and the pipeline's state records at its first run (state/sink.py), so that later
runs and the maintenance DAG read it from there rather than repeat it.

Which formats there are is the sinks' own business (sinks/factory.py holds their registry); this
record only carries the format's name, checked where a sink is opened or a DAG is built.
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.selection import parse_entry
from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat

#: the environment variable a task and its Spark programs hold a sink catalog's properties in (JSON;
#: state/credentials.py installs it beside the object store's credentials, never in a job file)
CATALOG_VARIABLE = "MYSQLCDC_SINK_CATALOG"
#: the default table format
DEFAULT_FORMAT = "delta"
#: the default namespace template: a table's namespace is its source database
DEFAULT_NAMESPACE = "{database}"
#: how a batch of changes reaches a table's files: by marking replaced rows deleted and appending
#: their new images (merge-on-read: Delta deletion vectors, Iceberg position deletes), or by
#: rewriting every file holding a changed key (copy-on-write); None: the format's default
MERGE_MODES = ("merge-on-read", "copy-on-write")


def check_namespace(template: str) -> str:
    """``template`` when it is a namespace template, else the error with the fix."""
    fields_ = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    if not template.strip() or any(name != "database" for name in fields_):
        raise ConfigurationError(f"iceberg_namespace must be a namespace, optionally holding {{database}} (the source "
                                 f"table's database), e.g. '{{database}}' or 'lake_{{database}}'; got {template!r}.")
    return template


def check_table_merge_modes(entries: Any) -> tuple[tuple[str, str], ...]:
    """``entries`` (a mapping or pairs of a table name or pattern and a merge mode) as the spec holds
    them, else the error naming the entry and the fix."""
    pairs = list(entries.items()) if isinstance(entries, dict) else list(entries or ())
    checked = []
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise ConfigurationError(f"merge_modes maps a table name or pattern to a merge mode, e.g. "
                                     f"{{'shop.audit_log': 'copy-on-write'}}; got the entry {pair!r}.")
        entry, mode = pair
        parse_entry(entry)  # a malformed name or pattern is refused, naming it
        if mode not in MERGE_MODES:
            raise ConfigurationError(f"merge_modes[{entry!r}] must be one of {', '.join(MERGE_MODES)}; got {mode!r}.")
        checked.append((entry, mode))
    return tuple(checked)


def merge_mode_for(table_id: TableId, table_merge_modes: tuple[tuple[str, str], ...], default: str) -> str:
    """The merge mode of the sink table ``table_id``: that of the first entry of ``table_merge_modes``
    naming it (a name, or a pattern it matches), else ``default``."""
    for entry, mode in table_merge_modes:
        parsed = parse_entry(entry)
        if parsed == table_id if isinstance(parsed, TableId) else parsed.matches(table_id):
            return mode
    return default


@dataclass(frozen=True)
class SinkSpec:
    """Which sink a pipeline writes, and where its tables are placed.

    ``root`` is where the tables live (a local path or an object store URL: Delta tables, and an
    Iceberg table's data unless its catalog places it); ``format`` the table format (a name of
    sinks/factory.py's registry); ``namespace`` the template of an Iceberg table's namespace
    (``{database}``: the source table's); ``catalog_conn_id`` the Airflow connection holding an
    Iceberg catalog's properties (None: the embedded catalog of a local lake); ``merge_mode`` one of
    ``MERGE_MODES`` (None: the format's default), and ``table_merge_modes`` the tables (names or
    patterns of sink tables) merged otherwise, both of which a pipeline may change between runs (both
    modes write the same tables). Nothing in it is a secret: the catalog's properties travel with
    the object store's credentials (state/credentials.py).
    """

    FORMAT: ClassVar[RecordFormat] = RecordFormat("sink-spec", 3)

    root: str
    format: str = DEFAULT_FORMAT
    namespace: str = DEFAULT_NAMESPACE
    catalog_conn_id: str | None = None
    merge_mode: str | None = None
    table_merge_modes: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.format, str) or not self.format:
            raise ConfigurationError(f"sink_format must name a table format, e.g. 'delta' or 'iceberg'; got "
                                     f"{self.format!r}.")
        check_namespace(self.namespace)
        if self.merge_mode is not None and self.merge_mode not in MERGE_MODES:
            raise ConfigurationError(f"merge_mode must be one of {', '.join(MERGE_MODES)} (or None: the format's "
                                     f"default); got {self.merge_mode!r}.")
        object.__setattr__(self, "table_merge_modes", check_table_merge_modes(self.table_merge_modes))

    def merge_mode_of(self, table_id: TableId, default: str) -> str:
        """The merge mode of the sink table ``table_id`` (``default``: the format's)."""
        return merge_mode_for(table_id, self.table_merge_modes, self.merge_mode or default)

    def differences(self, other: "SinkSpec") -> list[str]:
        """The settings in which ``other`` differs from this spec, each as ``name: ours != theirs``."""
        return [f"{_SETTING[f.name]} {getattr(self, f.name)!r} != {getattr(other, f.name)!r}" for f in fields(self)
                if f.name not in _CHANGEABLE
                and _comparable(f.name, getattr(self, f.name)) != _comparable(f.name, getattr(other, f.name))]

    def describe(self) -> str:
        return ", ".join(f"{_SETTING[f.name]}={getattr(self, f.name)!r}" for f in fields(self))

    def to_body(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "SinkSpec":
        return cls(**{**body, "table_merge_modes": tuple(tuple(p) for p in body.get("table_merge_modes", ()))})


#: how the operators and the builder name each setting of a spec (what an error tells the user to change)
_SETTING = {"root": "sink_root", "format": "sink_format", "namespace": "iceberg_namespace",
            "catalog_conn_id": "iceberg_catalog_conn_id", "merge_mode": "merge_mode",
            "table_merge_modes": "merge_modes"}
#: settings a pipeline may change between runs: they do not name another sink
_CHANGEABLE = {"merge_mode", "table_merge_modes"}


def _comparable(name: str, value: Any) -> Any:
    """A setting as two specs are compared: a root without its trailing slashes."""
    return value.rstrip("/") if name == "root" and isinstance(value, str) else value
