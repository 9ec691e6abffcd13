"""What merge-on-read decides the same way in every table format (sinks/delta/merge_on_read.py,
sinks/iceberg/merge_on_read.py): which rows of the table a batch's changes replace, which changes
are dropped as older than their row, which new images are written, which columns an image takes
from the row it replaces, and when a file is rewritten rather than given deletes. Where the rows
are (``Matches``) and how deletes are written are each format's own."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: a data file whose live rows one batch deletes at least this share of is rewritten, not given deletes
REWRITE_SHARE = 0.5
VERSION_COLUMN = "_cdc_version"
#: a data file's row position beside its keys, and a change's row number beside its keys (``matched``)
POSITION_COLUMN, ROW_COLUMN = "__mysqlcdc_pos", "__mysqlcdc_row"
#: a data file of any format (``holding``)
F = TypeVar("F")


@dataclass(frozen=True)
class Matches:
    """Rows of the table that hold a changed key: the change's row, the data file, the position in
    it and the row's ``_cdc_version``."""

    rows: np.ndarray
    paths: np.ndarray
    positions: np.ndarray
    versions: np.ndarray

    @classmethod
    def none(cls) -> "Matches":
        empty = np.array([], dtype=np.int64)
        return cls(empty, np.array([], dtype=object), empty, empty)

    @classmethod
    def joined(cls, found: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray]]) -> "Matches":
        """The matches of several files, each as (path, change rows, positions, versions)."""
        if not found:
            return cls.none()
        return cls(np.concatenate([f[1] for f in found]),
                   np.concatenate([np.full(len(f[1]), f[0], dtype=object) for f in found]),
                   np.concatenate([f[2] for f in found]), np.concatenate([f[3] for f in found]))


@dataclass(frozen=True)
class Decision:
    """What a batch does to the table, decided per key as the copy-on-write merge does: a change
    newer than its row replaces it (a delete removes it), an older one is dropped, a key no file
    holds is inserted unless the change deletes it."""

    deleted: dict[str, list[int]]  # data file: the positions of the rows the batch replaces or deletes
    replaced: dict[int, tuple[str, int]]  # change row: the file and position of the row it replaces
    image_rows: list[int]  # the change rows whose images the batch writes


def decide(changes: pa.Table, matches: Matches) -> Decision:
    """The ``Decision`` for ``changes`` (the last change per key, with ``_cdc_op`` and
    ``_cdc_version``) whose keys the table holds at ``matches``."""
    change_versions = np.asarray(changes.column(VERSION_COLUMN).to_numpy(zero_copy_only=False))
    ops = changes.column("_cdc_op").to_pylist()
    newer = change_versions[matches.rows] > matches.versions
    stale_rows = set(matches.rows[~newer].tolist())  # a row as new as the change: the change is dropped
    deleted: dict[str, list[int]] = defaultdict(list)
    replaced: dict[int, tuple[str, int]] = {}
    for path, position, row in zip(matches.paths[newer], matches.positions[newer], matches.rows[newer]):
        if int(row) in stale_rows:
            continue
        deleted[str(path)].append(int(position))
        replaced[int(row)] = (str(path), int(position))
    image_rows = [i for i in range(changes.num_rows) if ops[i] != "d" and i not in stale_rows]
    return Decision(dict(deleted), replaced, image_rows)


def rewrites(physical_rows: int, deleted_before: int, deleted_now: int) -> bool:
    """Whether a data file of ``physical_rows`` rows, ``deleted_before`` of them deleted already and
    ``deleted_now`` once the batch applies, is rewritten (its survivors copied into the batch's new
    file, or it is removed when none survives) rather than given deletes: copying a few survivors
    costs less than keeping a mostly deleted file."""
    live_rows = physical_rows - deleted_before
    return deleted_now >= physical_rows or deleted_now - deleted_before >= REWRITE_SHARE * live_rows


def carried_columns(changes: pa.Table, decision: Decision, absent: Sequence[pa.Field],
                    old_rows: Callable[[str, list[int]], pa.Table]) -> dict[str, pa.Array]:
    """For each column of ``absent`` (the table's columns the changes lack: the source dropped them),
    its values for the batch's images: in an update of a row the table held, that row's value
    (``old_rows(file, positions)`` reads them; a file without the column gives NULL), NULL
    elsewhere, as in the copy-on-write merge."""
    ops = changes.column("_cdc_op").to_pylist()
    by_file: dict[str, list[tuple[int, int]]] = defaultdict(list)  # file: (image index, position)
    for index, row in enumerate(decision.image_rows):
        if row in decision.replaced and ops[row] != "c":  # an insert of a key the table held takes NULL
            path, position = decision.replaced[row]
            by_file[path].append((index, position))
    values: dict[str, list] = {f.name: [None] * len(decision.image_rows) for f in absent}
    for path, pairs in by_file.items():
        old = old_rows(path, [p for _, p in pairs])
        for field in absent:
            if field.name not in old.column_names:  # a file written before the column was added
                continue
            for (index, _), value in zip(pairs, old.column(field.name).to_pylist()):
                values[field.name][index] = value
    return {f.name: pa.array(values[f.name], f.type) for f in absent}


def matched(held: pa.Table, query: pa.Table, key_columns: Sequence[str],
            keep: pa.Array | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The (change row, position) pairs where a data file's rows ``held`` (its key columns, as
    ``join_keys`` gives them, and ``POSITION_COLUMN``; only those ``keep`` marks) hold a key of
    ``query`` (the changes' key columns and ``ROW_COLUMN``): a membership test on the first key
    column, then a join of the rows it keeps."""
    first = query.column(key_columns[0]).combine_chunks()
    column = held.column(key_columns[0])
    maybe = pc.is_in(column if column.type.equals(first.type) else column.cast(first.type), value_set=first,
                     skip_nulls=False)
    held = held.filter(maybe if keep is None else pc.and_(maybe, keep))
    if not held.num_rows:
        empty = np.array([], dtype=np.int64)
        return empty, empty
    target = pa.Table.from_arrays([held.column(k).cast(query.schema.field(k).type) for k in key_columns]
                                  + [held.column(POSITION_COLUMN)], names=[*key_columns, POSITION_COLUMN])
    joined = target.join(query, keys=list(key_columns), join_type="inner", use_threads=False)
    return joined.column(ROW_COLUMN).to_numpy(), joined.column(POSITION_COLUMN).to_numpy()


def join_keys(table: pa.Table, key_columns: Sequence[str], nullable_keys: set[str]) -> pa.Table:
    """The key columns to match on: a nullable key column (a temporal key and its zero-date companion,
    never both NULL) with its NULL replaced, so that NULL matches NULL as in the copy-on-write merge."""
    columns = []
    for name in key_columns:
        column = table.column(name)
        if name in nullable_keys:
            column = pc.fill_null(column, pa.scalar("" if pa.types.is_string(column.type) else 0, column.type))
        columns.append(column)
    return pa.Table.from_arrays(columns, names=list(key_columns))


def holding(files: Iterable[F], bounds: Callable[[F], tuple[str | None, str | None]], chunks: pa.ChunkedArray) -> list[F]:
    """The ``files`` whose ``_cdc_chunk`` range (``bounds``: lowest, highest) holds one of ``chunks``
    (unknown bounds: held)."""
    keys = sorted({k for k in chunks.to_pylist() if k is not None})
    held = []
    for data_file in files:
        low, high = bounds(data_file)
        if low is None or high is None or bisect.bisect_left(keys, low) < bisect.bisect_right(keys, high):
            held.append(data_file)
    return held
