"""Which rows an Iceberg write replaces, and by what (sinks/iceberg/sink.py): filters on ``_cdc_chunk``
(a range, a set of chunk keys) and ``_cdc_version``, and a batch's last changes merged into the rows
they touch, by the rule every sink keeps (sinks/base.py): a change applies where it is newer than
its row."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    GreaterThanOrEqual,
    In,
    LessThan,
    Or,
)

from airflow_provider_mysqlcdc.sinks.arrow_rows import CHUNK_COLUMN
from airflow_provider_mysqlcdc.sinks.base import StreamCommit
from airflow_provider_mysqlcdc.sinks.routing import shard_bounds

#: at most this many chunk keys in one ``In`` of a filter (``chunk_filter``)
IN_GROUP = 200


def merged(existing: pa.Table, changes: pa.Table, keys: list[str], carried: Sequence[str] = ()) -> pa.Table:
    """The rows that replace ``existing`` (the rows of the changed chunk keys) once ``changes`` (the
    last change per key) are applied: a change applies where it is newer than its row (``_cdc_version``),
    a delete removes the row, any other change replaces or inserts it. Keys match NULL-safely (a
    temporal key column is NULL beside its zero-date companion). ``carried``: columns the changes do
    not carry (the source dropped them since the sink took them), which an update keeps as its row
    had them, as Delta's merge does; an insert holds NULL there."""
    by_key = {key: i for i, key in enumerate(zip(*(changes.column(k).to_pylist() for k in keys)))}
    versions, ops = changes.column("_cdc_version").to_pylist(), changes.column("_cdc_op").to_pylist()
    take = [op != "d" for op in ops]
    keep = []
    replaces: list[int | None] = [None] * changes.num_rows  # the existing row an update replaces
    old_versions = existing.column("_cdc_version").to_pylist()
    for row, key in enumerate(zip(*(existing.column(k).to_pylist() for k in keys))):
        i = by_key.get(key)
        if i is None:
            keep.append(True)
        elif versions[i] > old_versions[row]:
            keep.append(False)
            replaces[i] = row if ops[i] == "u" else None
        else:  # the row is as new as the change already (a replayed split, or staged rows)
            keep.append(True)
            take[i] = False
    if carried and any(r is not None for r in replaces):
        rows = pa.array(replaces, pa.int64())
        for name in carried:
            at = changes.schema.get_field_index(name)
            kept = pc.if_else(pc.is_valid(rows), existing.column(name).take(rows), changes.column(name))
            changes = changes.set_column(at, changes.field(at), kept)
    return pa.concat_tables([existing.filter(pa.array(keep, pa.bool_())), changes.filter(pa.array(take, pa.bool_()))])


def chunk_filter(chunks: list[str]) -> BooleanExpression:
    """The rows whose ``_cdc_chunk`` is one of ``chunks``, as ``In`` filters of at most 200 values
    each: pyiceberg prunes files by the bounds of an ``In`` of up to 200 values only, and reads every
    file for a larger one. The ``In`` filters are joined as a balanced tree of ``Or`` (``any_of``)."""
    return any_of([In(CHUNK_COLUMN, chunks[at:at + IN_GROUP]) for at in range(0, len(chunks), IN_GROUP)])


def any_of(filters: list[BooleanExpression]) -> BooleanExpression:
    """``filters`` joined by ``Or`` as a balanced tree, as deep as the logarithm of their number:
    pyiceberg's ``Or(a, b, c, ...)`` nests to the left, and visits expressions recursively, so a chain
    of a merge's 500 ``In`` filters overflows Python's stack."""
    if not filters:
        return AlwaysFalse()
    if len(filters) == 1:
        return filters[0]
    middle = len(filters) // 2
    return Or(any_of(filters[:middle]), any_of(filters[middle:]))


def range_filter(start: str | None, end: str | None) -> BooleanExpression:
    parts: list[BooleanExpression] = []
    if start is not None:
        parts.append(GreaterThanOrEqual(CHUNK_COLUMN, start))
    if end is not None:
        parts.append(LessThan(CHUNK_COLUMN, end))
    return functools.reduce(And, parts) if parts else AlwaysTrue()


def older_than(version: int, commit: StreamCommit) -> BooleanExpression:
    older: BooleanExpression = LessThan("_cdc_version", int(version))
    return older if not commit.shard else And(older, range_filter(*shard_bounds(commit.shard)))
