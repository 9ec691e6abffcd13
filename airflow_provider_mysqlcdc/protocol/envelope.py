"""The envelope every record that crosses a process boundary is written in.

A record is a JSON object whose first two keys say what it is and how its fields are laid out::

    {"record": "registry-generation", "format_version": 1, "number": 3, ...}

A reader knows the newest ``format_version`` of each record it reads and refuses anything newer
(a newer provider wrote it: its fields may mean something this code does not know) with an error
that names the file and the fix. Files written before the envelope existed carry neither key and
read as version 0; a record class turns older versions into its current fields in ``from_body``.
Any change to a record's fields is a new format version, so a reader never half-understands one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, ProtocolError, ProtocolVersionError

RECORD, FORMAT_VERSION = "record", "format_version"


@dataclass(frozen=True)
class RecordFormat:
    kind: str  # what the record is ("registry-generation")
    version: int  # the layout this code writes; it reads every version up to it


class Record(Protocol):
    FORMAT: ClassVar[RecordFormat]

    def to_body(self) -> dict[str, Any]: ...

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> Any: ...


R = TypeVar("R")


def encode(record: Record) -> dict[str, Any]:
    """``record`` as a JSON-ready dict, in its envelope."""
    return {RECORD: record.FORMAT.kind, FORMAT_VERSION: record.FORMAT.version, **record.to_body()}


def decode(cls: type[R], data: Any, where: str) -> R:
    """The ``cls`` record ``data`` holds (read from ``where``, named in errors)."""
    fmt: RecordFormat = cls.FORMAT  # type: ignore[attr-defined]
    if not isinstance(data, dict):
        raise ProtocolError(f"{where} holds {type(data).__name__} where a {fmt.kind} record (a JSON object) belongs.")
    kind = data.get(RECORD, fmt.kind)  # written before the envelope: the place says what it is
    if kind != fmt.kind:
        raise ProtocolError(f"{where} holds a {kind!r} record where a {fmt.kind!r} record belongs: "
                            "two pipelines or tools share one location, or the file was replaced by hand.")
    version = data.get(FORMAT_VERSION, 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ProtocolError(f"{where}: {FORMAT_VERSION} {version!r} of the {kind} record is not a version number.")
    if version > fmt.version:
        from airflow_provider_mysqlcdc import __version__

        raise ProtocolVersionError(
            f"{where} is a {kind} record of format version {version}, but this airflow-provider-mysqlcdc "
            f"({__version__}) reads versions up to {fmt.version}: a newer version of the provider wrote it. "
            "Install that version everywhere the pipeline runs (the Airflow workers and the Python "
            "environment of the Spark jobs); nothing was read or written.")
    body = {k: v for k, v in data.items() if k not in (RECORD, FORMAT_VERSION)}
    try:
        return cls.from_body(body, version)  # type: ignore[attr-defined]
    except ProtocolError:
        raise
    except (KeyError, TypeError, ValueError, ConfigurationError) as exc:
        raise ProtocolError(f"{where}: malformed {kind} record (format version {version}): "
                            f"{type(exc).__name__}: {exc}") from exc
