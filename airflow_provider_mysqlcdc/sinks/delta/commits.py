"""What a stream's commit records in a Delta table (sinks/delta/sink.py): the position of its last
change, as ``txn`` actions in the same commit as its data (per shard of a routed table, its own), and
the stream's own ``txn`` (its checkpoint identity and batch). Written by delta-rs's commits
(``commit_properties``) and by the merge-on-read ones (``transactions``, sinks/delta/log.py) alike."""

from __future__ import annotations

from deltalake import CommitProperties, DeltaTable, Transaction

from airflow_provider_mysqlcdc.sinks.base import Position, StreamCommit

#: txn app ids holding the position of the last change a stream committed (sinks/base.py)
_POSITION, _POSITION_ORDER = "mysqlcdc.position", "mysqlcdc.position.order"
_ORDER_BITS = 24


def commit_properties(commit: StreamCommit | None) -> CommitProperties | None:
    """A stream commit's position, as two Delta ``txn`` actions in the same commit as its data: Delta
    keeps the latest ``txn`` of every app id in its snapshot state (checkpoints included), so the
    position is read back in O(1) and never lost to log clean-up. The stream's own ``txn`` (its
    checkpoint identity and batch) shows which stream wrote the commit."""
    if commit is None:
        return None
    return CommitProperties(app_transactions=[Transaction(app_id, version) for app_id, version in transactions(commit)])


def transactions(commit: StreamCommit) -> list[tuple[str, int]]:
    """The ``txn`` actions (app id, version) of a stream commit (``commit_properties``)."""
    file_number, position, row, part = commit.position
    offset_id, order_id = _position_ids(commit.shard)
    return [(offset_id, (file_number << 32) | position), (order_id, ((row + 1) << _ORDER_BITS) | part),
            (commit.app_id, commit.batch_id)]


def _position_ids(shard: str) -> tuple[str, str]:
    """The ``txn`` app ids of the position of a table, or of one shard of a routed table (each shard
    has its own: shards commit apart, so one shard's position says nothing of another's)."""
    return (_POSITION, _POSITION_ORDER) if not shard else (f"{_POSITION}:{shard}", f"{_POSITION_ORDER}:{shard}")


def applied_position(table: DeltaTable, shard: str = "") -> Position | None:
    """The position the table's (or its ``shard``'s) last stream commit recorded, if any."""
    offset_id, order_id = _position_ids(shard)
    offset, order = table.transaction_version(offset_id), table.transaction_version(order_id)
    if offset is None or order is None:
        return None
    return (offset >> 32, offset & 0xFFFFFFFF, (order >> _ORDER_BITS) - 1, order & ((1 << _ORDER_BITS) - 1))
