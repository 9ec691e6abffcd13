"""Snapshot splits of a table (its key ranges), and the metadata of a finished split.

A split covers chunk-key values ``start <= k < end``; ``start`` is None for the first split
(open below) and ``end`` None for the last (open above). Boundaries are values of the chunk key as
the database returned them (normalised like every other value); where a key lies relative to them
is decided by the column's order as the database defines it (records/ordering.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, quote_identifier, with_params


@dataclass(frozen=True)
class SnapshotSplit:
    table_id: TableId
    index: int
    chunk_key: str
    start: Any = None
    end: Any = None

    @property
    def split_id(self) -> str:
        return f"{self.table_id}:{self.index}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "database": self.table_id.database,
            "table": self.table_id.table,
            "index": self.index,
            "chunk_key": self.chunk_key,
            "start": encode_value(self.start),
            "end": encode_value(self.end),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SnapshotSplit":
        return cls(
            table_id=TableId(data["database"], data["table"]),
            index=int(data["index"]),
            chunk_key=data["chunk_key"],
            start=decode_value(data["start"]),
            end=decode_value(data["end"]),
        )


@dataclass(frozen=True)
class FinishedSplit:
    """A split that has been read: its content is exact as of ``high_watermark``.

    ``staged``: the URL of the Parquet file holding its rows, when the stream applies them (the table
    was captured before; state/registry.py); ``stream_only``: no rows, the table is streamed from
    ``high_watermark`` without a snapshot. ``partitions`` and ``seconds`` say how it was read."""

    split: SnapshotSplit
    high_watermark: BinlogOffset
    low_watermark: BinlogOffset | None = None
    rows: int = 0
    binlog_events_merged: int = 0
    staged: str | None = None
    stream_only: bool = False
    partitions: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = {
            "split": self.split.to_dict(),
            "high_watermark": self.high_watermark.to_dict(),
            "low_watermark": self.low_watermark.to_dict() if self.low_watermark else None,
            "rows": self.rows,
            "binlog_events_merged": self.binlog_events_merged,
        }
        optional = {"staged": self.staged, "stream_only": self.stream_only, "partitions": self.partitions,
                    "seconds": self.seconds}
        return {**data, **{k: v for k, v in optional.items() if v}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FinishedSplit":
        extra = data.get("extra", {})  # records written before these fields had names kept them in "extra"
        return cls(
            split=SnapshotSplit.from_dict(data["split"]),
            high_watermark=BinlogOffset.from_dict(data["high_watermark"]),
            low_watermark=BinlogOffset.from_dict(data["low_watermark"]) if data.get("low_watermark") else None,
            rows=int(data.get("rows", 0)),
            binlog_events_merged=int(data.get("binlog_events_merged", 0)),
            staged=data.get("staged", extra.get("staged")),
            stream_only=bool(data.get("stream_only", extra.get("stream_only", False))),
            partitions=int(data.get("partitions", extra.get("partitions", 0))),
            seconds=float(data.get("seconds", extra.get("seconds", 0.0))),
        )


def key_range_sql(split: SnapshotSplit) -> tuple[str, tuple[Any, ...]]:
    """`` WHERE start <= k AND k < end`` (or nothing), compared by the database under its collation;
    a statement executed with parameters (schema.py ``with_params``)."""
    key = with_params(quote_identifier(split.chunk_key))
    conditions, args = [], []
    if split.start is not None:
        conditions.append(f"{key} >= %s")
        args.append(split.start)
    if split.end is not None:
        conditions.append(f"{key} < %s")
        args.append(split.end)
    return (" WHERE " + " AND ".join(conditions) if conditions else ""), tuple(args)


# --- JSON encoding of chunk-key values (ints beyond 2**53, Decimal, bytes, dates survive) -----------

def encode_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return {"int": str(value)}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"timedelta_us": str((value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds)}
    raise ConfigurationError(f"Cannot encode chunk-key value {value!r} of type {type(value).__name__}")


def decode_value(data: Any) -> Any:
    if data is None or isinstance(data, (bool, str)):
        return data
    if not isinstance(data, dict) or len(data) != 1:
        raise ConfigurationError(f"Malformed encoded value {data!r}")
    (kind, text), = data.items()
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "decimal":
        return decimal.Decimal(text)
    if kind == "bytes":
        return base64.b64decode(text)
    if kind == "datetime":
        return dt.datetime.fromisoformat(text)
    if kind == "date":
        return dt.date.fromisoformat(text)
    if kind == "timedelta_us":
        return dt.timedelta(microseconds=int(text))
    raise ConfigurationError(f"Unknown encoded value kind {kind!r}")

