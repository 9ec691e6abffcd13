"""The registry and what a run changes in it (state/): generations, activation diffs, landing rules."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.planning.changes import ResnapshotRequest, decide_action, next_tables, parse_offset
from airflow_provider_mysqlcdc.protocol.plans import TablePlan
from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, Generation
from airflow_provider_mysqlcdc.state.generations import added_since, start_offset
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables

T = TableId("shop", "orders")
U = TableId("shop", "users")


def splits(table: TableId, bounds: list[int]) -> list[SnapshotSplit]:
    edges = [None, *bounds, None]
    return [SnapshotSplit(table, i, "id", edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def finish(split: SnapshotSplit, position: int, **fields) -> FinishedSplit:
    return FinishedSplit(split, BinlogOffset("binlog.000001", position), **fields)


def test_generations_are_immutable_numbered_and_skip_no_change(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    assert state.latest().number == 0 and start_offset(state.latest()) is None
    first = state.commit(captured_tables([finish(s, 100 + s.index) for s in splits(T, [10])]))
    assert first.number == 1 and state.needs_staging(T) and not state.needs_staging(U)
    assert state.commit(dict(first.tables)).number == 1, "an unchanged registry must not make a generation"
    second = state.commit({})  # T removed
    assert second.number == 2 and not second.tables and T in second.history and state.needs_staging(T)
    assert state.load(1).tables[T].splits == first.tables[T].splits
    assert start_offset(state.load(1)) == BinlogOffset("binlog.000001", 100)


def test_added_since_lists_new_tables_and_replaced_splits_only():
    old = Generation(1, captured_tables([finish(s, 100) for s in splits(T, [10, 20])]))
    replaced = finish(splits(T, [10, 20])[1], 300, staged="/x/split-1.parquet")
    new_tables = captured_tables([finish(s, 100) for s in splits(T, [10, 20])] + [finish(splits(U, [])[0], 200)])
    new_tables[T].splits[1] = replaced
    added = added_since(Generation(2, new_tables), old)
    assert [(f.split.table_id, f.split.index) for f in added] == [(T, 1), (U, 0)]


def test_a_rerun_chunk_lands_only_when_newer_and_an_old_run_changes_nothing():
    planned = splits(T, [10, 20])
    current = Generation(1, captured_tables([finish(s, 100) for s in planned]))
    plan = TablePlan(T, "id", "snapshot", planned)
    rerun = [finish(planned[0], 100), finish(planned[1], 500, staged="p"), finish(planned[2], 100)]
    tables = next_tables(current, [plan], rerun, exact=True)
    assert [f.high_watermark.position for f in tables[T].splits] == [100, 500, 100]
    older = [finish(s, 50) for s in planned]
    assert next_tables(Generation(2, tables), [plan], older, exact=True)[T].splits == tables[T].splits


def test_whole_table_resnapshot_replaces_the_split_set_and_missing_splits_fail():
    current = Generation(1, captured_tables([finish(s, 100) for s in splits(T, [10, 20])]))
    replanned = splits(T, [15])
    plan = TablePlan(T, "id", "resnapshot", replanned)
    tables = next_tables(current, [plan], [finish(s, 400, staged="p") for s in replanned], exact=True)
    assert [s.split for s in tables[T].splits] == replanned
    with pytest.raises(ConfigurationError, match="did not finish"):
        next_tables(current, [plan], [finish(replanned[0], 400)], exact=True)


def test_exact_runs_remove_unnamed_tables_and_stream_only_tables_register_at_their_offset():
    current = Generation(1, captured_tables([finish(s, 100) for s in splits(T, [])]))
    plan = TablePlan(U, "id", "stream-only", stream_from=BinlogOffset("binlog.000002", 4))
    tables = next_tables(current, [plan], [], exact=True)
    assert set(tables) == {U} and tables[U].splits[0].stream_only
    assert set(next_tables(current, [plan], [], exact=False)) == {T, U}


def test_actions_offsets_and_requests_are_checked():
    registered = CapturedTable("id", [finish(s, 100) for s in splits(T, [10])])
    whole, ranged = ResnapshotRequest.parse_all(["shop.orders", {"table": "shop.users", "from": 1, "to": 5}])
    assert decide_action(T, None, [], "initial") == ("snapshot", None)
    assert decide_action(T, None, [], "latest") == ("stream-only", None)
    assert decide_action(T, registered, [], "initial") == ("keep", None)
    assert decide_action(T, registered, [whole], "initial") == ("resnapshot", None)
    assert decide_action(U, registered, [ranged], "initial") == ("resnapshot-splits", ranged)
    assert parse_offset("mysql-bin.000042:1234") == BinlogOffset("mysql-bin.000042", 1234)
    for bad in ("mysql-bin.000042", "x:12", {"file": "binlog.000001"}):
        with pytest.raises(ConfigurationError, match="Malformed binlog offset"):
            parse_offset(bad)
    with pytest.raises(ConfigurationError, match="Unknown startup mode"):
        decide_action(T, None, [], "earliest-offset")
    for mode in ("latest", "offset", "earliest", "timestamp"):  # every mode but initial streams a new table only
        assert decide_action(T, None, [], mode) == ("stream-only", None)
    with pytest.raises(ConfigurationError, match="Malformed re-snapshot request"):
        ResnapshotRequest.parse_all([{"table": "shop.orders", "upto": 3}])


def test_schema_drift_resnapshots_a_table_read_before_it_and_only_then(tmp_path):
    from airflow_provider_mysqlcdc.state.drift import pending_drift, read_drift, record_drift

    state = PipelineState(str(tmp_path / "state"))
    captured = captured_tables([finish(s, 100 + s.index) for s in splits(T, [10])])[T]
    assert pending_drift(read_drift(state), T, captured) == []
    drift = read_drift(state)
    record_drift(state, drift, T, TableEventKind.ALTERED, BinlogOffset("binlog.000001", 500), "column(s) note dropped")
    record_drift(state, drift, T, TableEventKind.ALTERED, BinlogOffset("binlog.000001", 50), "before every split")
    assert [e.reason for e in pending_drift(read_drift(state), T, captured)] == ["column(s) note dropped"]
    assert pending_drift(read_drift(state), U, captured) == []
    assert decide_action(T, captured, [], "initial", drifted=True) == ("resnapshot", None)
    assert decide_action(T, captured, [], "initial") == ("keep", None)
    assert decide_action(U, None, [], "initial", drifted=True) == ("snapshot", None)
    # re-snapshotted after the drift (every split read past it): nothing is due any more
    again = captured_tables([finish(s, 600 + s.index) for s in splits(T, [10])])[T]
    assert pending_drift(read_drift(state), T, again) == []


def test_recording_the_same_drift_event_twice_keeps_one(tmp_path):
    from airflow_provider_mysqlcdc.state.drift import read_drift, record_drift

    state = PipelineState(str(tmp_path / "state"))
    at = BinlogOffset("binlog.000001", 500)
    assert record_drift(state, read_drift(state), T, TableEventKind.DROPPED, at, "dropped")
    assert not record_drift(state, read_drift(state), T, TableEventKind.DROPPED, at, "dropped (a replayed batch)")
    assert [e.kind for e in read_drift(state)[T]] == [TableEventKind.DROPPED]


def test_a_table_is_frozen_from_its_first_drop_or_rename_after_its_splits_until_re_snapshotted(tmp_path):
    from airflow_provider_mysqlcdc.state.drift import frozen_since, read_drift, record_drift

    state = PipelineState(str(tmp_path / "state"))
    captured = captured_tables([finish(s, 100 + s.index) for s in splits(T, [10])])[T]
    drift = read_drift(state)
    record_drift(state, drift, T, TableEventKind.ROWS_CHANGED, BinlogOffset("binlog.000001", 200), "partition")
    assert frozen_since(read_drift(state), T, captured) is None  # rows changed: re-snapshot, but keep streaming
    record_drift(state, drift, T, TableEventKind.RENAMED, BinlogOffset("binlog.000001", 300), "renamed")
    record_drift(state, drift, T, TableEventKind.CREATED, BinlogOffset("binlog.000001", 400), "created again")
    record_drift(state, drift, T, TableEventKind.DROPPED, BinlogOffset("binlog.000001", 500), "dropped")
    assert frozen_since(read_drift(state), T, captured) == BinlogOffset("binlog.000001", 300)
    again = captured_tables([finish(s, 450 + s.index) for s in splits(T, [10])])[T]  # re-read after the rename
    assert frozen_since(read_drift(state), T, again) == BinlogOffset("binlog.000001", 500)


def test_staged_rows_of_tables_named_like_paths_stay_inside_the_staging_folder(tmp_path):
    import os

    from airflow_provider_mysqlcdc.cdc.model.schema import TableId
    from airflow_provider_mysqlcdc.state.registry import PipelineState

    state = PipelineState(str(tmp_path / "state"))
    staged = tmp_path / "state" / "staged"
    urls = [state.staging_url(TableId(db, table)) for db, table in [("d", ".."), ("..", "."), ("d", "a/b"),
                                                                      ("d", "a@002fb"), ("d", "a\\b")]]
    for url in urls:
        assert os.path.normpath(url).startswith(str(staged) + os.sep), url
        assert len(os.path.relpath(os.path.normpath(url), staged).split(os.sep)) == 3, url  # <db>/<table>/<id>
    assert len({os.path.dirname(u) for u in urls}) == len(urls)  # one folder per table


def race_collects(make_state, collects: int = 8) -> None:
    """``collects`` collects commit at once, each with other tables (``make_state()``: one registry,
    opened anew by each): every generation number is won by one of them (a collect that read the
    registry after a winner may win the next number), the others fail with ConcurrentStateChange,
    and each generation holds its winner's tables (never the last writer's over the winner's)."""
    import threading

    from airflow_provider_mysqlcdc.cdc.errors import ConcurrentStateChange

    barrier = threading.Barrier(collects)
    outcomes: dict[int, object] = {}

    def collect(i: int) -> None:
        tables = captured_tables([finish(s, 100 + i) for s in splits(TableId("shop", f"t{i}"), [10])])
        state = make_state()
        barrier.wait()
        try:
            outcomes[i] = state.commit(tables)
        except ConcurrentStateChange as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=collect, args=(i,)) for i in range(collects)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = {i: outcome for i, outcome in outcomes.items() if isinstance(outcome, Generation)}
    numbers = sorted(generation.number for generation in won.values())
    assert numbers == list(range(1, len(won) + 1)), outcomes  # each number won once
    for i, generation in won.items():
        assert set(make_state().load(generation.number).tables) == {TableId("shop", f"t{i}")}


def test_collects_racing_for_one_generation_leave_one_winner_per_generation(tmp_path):
    for round_ in range(10):
        race_collects(lambda: PipelineState(str(tmp_path / f"state-{round_}")))  # noqa: B023 - called within the round


def test_a_table_with_a_failed_chunk_task_stays_as_registered_and_the_others_land():
    from airflow_provider_mysqlcdc.operators.collect import failed_chunks, kept_if_failed
    from airflow_provider_mysqlcdc.protocol.envelope import encode
    from airflow_provider_mysqlcdc.protocol.plans import ChunkPlan

    current = Generation(1, captured_tables([finish(s, 100) for s in splits(T, [10])]))
    resnapshot, new = TablePlan(T, "id", "resnapshot", splits(T, [15])), TablePlan(U, "id", "snapshot", splits(U, [5]))
    chunks = [encode(ChunkPlan(f"{t} chunk {n}", t, (s,))) for n, (t, s) in enumerate(
        [(T, resnapshot.splits[0]), (T, resnapshot.splits[0]), (U, new.splits[0])])]
    results = [{"a": "result"}, None, {"another": "result"}]  # T's second chunk task failed

    failed = failed_chunks(chunks, results)
    tables = next_tables(current, kept_if_failed([resnapshot, new], set(failed)),
                         [finish(resnapshot.splits[0], 400, staged="p")] + [finish(s, 400) for s in new.splits],
                         exact=True)

    assert failed == {T: [1]}
    assert tables[T] == current.tables[T]  # not half re-snapshotted, not removed
    assert [f.high_watermark.position for f in tables[U].splits] == [400, 400]
    assert not failed_chunks(chunks, [{"r": 1}] * 3)
