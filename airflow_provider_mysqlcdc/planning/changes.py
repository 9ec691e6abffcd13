"""What one DAG run changes in the registry: which tables it reads, and how its results land.

Per table a run decides one action (``decide_action``):

- ``snapshot``: never captured (or removed and named again): read every split.
- ``stream-only``: never captured and startup mode ``latest``/``offset``: no snapshot, stream from there.
- ``keep``: captured already: not read again (re-runs and backfills re-read nothing by accident).
- ``resnapshot``: asked for: read the whole table again, planned afresh.
- ``resnapshot-splits``: asked for a key range: read again the captured splits that overlap it.

``next_tables`` turns the finished splits into the next generation's tables. A result replaces a
registered split only when it is newer (a later high watermark), so re-collecting an old run after
a later re-snapshot changes nothing, and a cleared chunk's new result always lands.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.protocol.actions import PlanAction, StartupMode
from airflow_provider_mysqlcdc.protocol.plans import TablePlan
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, Generation, stream_only_split

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class ResnapshotRequest:
    """``db.table`` (whole table) or ``{"table": ..., "from": low, "to": high}`` (inclusive key range)."""

    table_id: TableId
    low: Any = None
    high: Any = None

    @property
    def whole_table(self) -> bool:
        return self.low is None and self.high is None

    @classmethod
    def parse_all(cls, value: Any) -> list["ResnapshotRequest"]:
        if value in (None, "", "None", []):
            return []
        if isinstance(value, (str, dict)):
            value = [value]
        requests = []
        for item in value:
            if isinstance(item, str):
                requests.append(cls(TableId.parse(item)))
            elif isinstance(item, dict) and "table" in item and set(item) <= {"table", "from", "to"}:
                requests.append(cls(TableId.parse(item["table"]), item.get("from"), item.get("to")))
            else:
                raise ConfigurationError(f"Malformed re-snapshot request {item!r}: write 'db.table' or "
                                         "{'table': 'db.table', 'from': <lowest key>, 'to': <highest key>}.")
        return requests


def parse_startup_mode(value: Any) -> str:
    if value not in set(StartupMode):
        raise ConfigurationError(f"Unknown startup mode {value!r}: use one of {', '.join(StartupMode)}.")
    return str(value)


def parse_offset(value: Any) -> BinlogOffset:
    """``'binlog.000042:1234'`` or ``{"file": ..., "position"|"pos": ...}``."""
    try:
        if isinstance(value, dict):
            return BinlogOffset(str(value["file"]), int(value["position"] if "position" in value else value["pos"]))
        file, _, position = str(value).strip().rpartition(":")
        return BinlogOffset(file, int(position))
    except (KeyError, TypeError, ValueError, ConfigurationError) as exc:
        raise ConfigurationError(f"Malformed binlog offset {value!r}: write 'binlog.000042:1234' (file:position), "
                                 "as SHOW MASTER STATUS / SHOW BINARY LOG STATUS reports it.") from exc


def decide_action(table_id: TableId, registered: CapturedTable | None, requests: list[ResnapshotRequest],
                  startup_mode: str, drifted: bool = False) -> tuple[PlanAction, ResnapshotRequest | None]:
    """What a run does for a table; ``drifted``: the stream saw a DDL the sink cannot follow (state/drift.py)."""
    startup_mode = parse_startup_mode(startup_mode)
    request = next((r for r in requests if r.table_id == table_id), None)
    if registered is None:
        return (PlanAction.SNAPSHOT if startup_mode == StartupMode.INITIAL or request else PlanAction.STREAM_ONLY), None
    if drifted:
        return PlanAction.RESNAPSHOT, None
    if request is None:
        return PlanAction.KEEP, None
    if request.whole_table or registered.stream_only:
        return PlanAction.RESNAPSHOT, None
    return PlanAction.RESNAPSHOT_SPLITS, request


def splits_overlapping(captured: CapturedTable, ordering: KeyOrdering, request: ResnapshotRequest) -> list[SnapshotSplit]:
    """The captured splits holding any key in ``[low, high]`` (in the column's database order)."""
    splits = [f.split for f in captured.splits]
    sample = next((v for s in splits for v in (s.start, s.end) if v is not None), None)
    low, high = (None if v is None else coerce_like(v, sample) for v in (request.low, request.high))
    keys = ordering.sort_keys([low, high] + [v for s in splits for v in (s.start, s.end)])
    low_key, high_key, bounds = keys[0], keys[1], keys[2:]
    chosen = []
    for i, split in enumerate(splits):
        start, end = bounds[2 * i], bounds[2 * i + 1]
        below_high = high_key is None or start is None or start <= high_key
        above_low = low_key is None or end is None or end > low_key
        if below_high and above_low:
            chosen.append(split)
    return chosen


_INTEGER_KEYS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year", "bit"})


def check_request_bounds(request: ResnapshotRequest, key: Column) -> None:
    """A key range's bounds must be values of the chunk key's type: an integer for an integer key
    (not 2.5, not 'abc'), a number for a DECIMAL, an ISO date or datetime for a DATE or DATETIME."""
    for name, value in (("from", request.low), ("to", request.high)):
        if value is None:
            continue
        t = key.data_type
        try:
            if t in _INTEGER_KEYS:
                ok = isinstance(value, int) and not isinstance(value, bool) or (
                    isinstance(value, str) and value.strip().lstrip("+-").isdigit())
            elif t == "decimal":
                ok = not isinstance(value, bool) and decimal.Decimal(str(value)).is_finite()
            elif t == "date":
                ok = bool(dt.date.fromisoformat(str(value)))
            elif t in ("datetime", "timestamp"):
                ok = bool(dt.datetime.fromisoformat(str(value)))
            else:
                ok = isinstance(value, str)
        except (ValueError, decimal.InvalidOperation):
            ok = False
        if not ok:
            raise ConfigurationError(f"Re-snapshot of {request.table_id}: '{name}' {value!r} is not a value of its chunk "
                                     f"key {key.name!r} ({key.column_type}): give a key value of that type.")


def coerce_like(value: Any, sample: Any) -> Any:
    """A key bound from JSON, as the type the split bounds have (int, Decimal, str, dates)."""
    if sample is None or isinstance(value, type(sample)) and not isinstance(value, bool):
        return value
    try:
        if isinstance(sample, dt.datetime):
            return dt.datetime.fromisoformat(str(value))
        if isinstance(sample, dt.date):
            return dt.date.fromisoformat(str(value))
        if isinstance(sample, decimal.Decimal):
            return decimal.Decimal(str(value))
        return type(sample)(value)
    except (TypeError, ValueError, decimal.InvalidOperation) as exc:
        raise ConfigurationError(f"Key bound {value!r} does not fit the chunk key (values like {sample!r}).") from exc


def next_tables(current: Generation, plans: Iterable[TablePlan], finished: Iterable[FinishedSplit], *,
                exact: bool) -> dict[TableId, CapturedTable]:
    """The tables of the next generation: ``current`` with this run's results landed on it.
    ``exact``: the run named the complete set of tables, so tables it did not name are removed."""
    plans = list(plans)
    tables = dict(current.tables)
    results: dict[TableId, dict[int, FinishedSplit]] = {}
    for split in finished:
        results.setdefault(split.split.table_id, {})[split.split.index] = split
    for plan in plans:
        table_id, registered = plan.table_id, tables.get(plan.table_id)
        if plan.action == PlanAction.KEEP:
            continue
        if plan.action == PlanAction.STREAM_ONLY:
            assert plan.stream_from is not None  # a stream-only plan carries its start
            if registered is None:
                tables[table_id] = CapturedTable(plan.chunk_key, [stream_only_split(table_id, plan.chunk_key,
                                                                                    plan.stream_from)],
                                                 plan.table_rule)
            continue
        got = results.get(table_id, {})
        missing = sorted({s.index for s in plan.splits} - set(got))
        if missing:
            raise ConfigurationError(f"{len(missing)} planned split(s) of {table_id} did not finish (indexes "
                                     f"{missing[:10]}): re-run their chunk tasks before collecting.")
        new = [got[s.index] for s in plan.splits]
        if registered is None:
            tables[table_id] = CapturedTable(plan.chunk_key, sorted(new, key=lambda f: f.split.index), plan.table_rule)
            continue
        by_index = {f.split.index: f for f in registered.splits}
        if all(f.split.index in by_index and by_index[f.split.index].split == f.split for f in new):
            # same boundaries (a re-run chunk, or a key-range re-snapshot): newer results win, split by split
            for f in new:
                if f.high_watermark > by_index[f.split.index].high_watermark:
                    by_index[f.split.index] = f
            tables[table_id] = CapturedTable(registered.chunk_key, [by_index[i] for i in sorted(by_index)],
                                             plan.table_rule)  # a changed rule plans the whole table again
        elif len(new) == len(plan.splits) and plan.action in (PlanAction.SNAPSHOT, PlanAction.RESNAPSHOT) and \
                min(f.high_watermark for f in new) > max(f.high_watermark for f in registered.splits):
            # planned afresh (a whole-table re-snapshot): the new split set replaces the old one
            tables[table_id] = CapturedTable(plan.chunk_key, sorted(new, key=lambda f: f.split.index), plan.table_rule)
        else:
            log.warning("results of %s are older than the splits registered since; left as registered", table_id)
    if exact:
        named = {p.table_id for p in plans}
        for table_id in sorted(set(tables) - named):
            log.warning("%s is no longer named: the stream stops capturing it (its sink table stays)", table_id)
            del tables[table_id]
    return tables
