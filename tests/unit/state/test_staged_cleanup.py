"""Staged split files are deleted once the stream's checkpoint can no longer replay their activation
(state/cleanup.py), on a real state folder."""

from __future__ import annotations

import pyarrow as pa

from airflow_provider_mysqlcdc.state.cleanup import release_staged_files
from airflow_provider_mysqlcdc.state.registry import PipelineState, captured_tables
from airflow_provider_mysqlcdc.state.staged import write_staged

from .test_registry import T, U, finish, splits


def test_files_go_once_their_generation_is_committed_and_not_before(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    parts = splits(T, [10])
    rows = pa.table({"id": [1]})

    def staged(name: str) -> str:
        url = state.staging_url(T) + f"/{name}.parquet"
        write_staged(url, rows)
        return url

    state.commit(captured_tables([finish(s, 100) for s in parts]))                      # 1: T written directly
    first = [staged("a0"), staged("a1")]
    state.commit(captured_tables([finish(s, 200, staged=u) for s, u in zip(parts, first)]))  # 2: T re-snapshot
    carried = captured_tables([finish(s, 200, staged=u) for s, u in zip(parts, first)] + [finish(splits(U, [])[0], 250)])
    state.commit(carried)                                                                 # 3: U added, T carried
    second = staged("b1")
    carried[T].splits[1] = finish(parts[1], 400, staged=second)
    state.commit(carried)                                                                 # 4: one split again

    def present() -> set[str]:
        return {u for u in [*first, second] if state.storage.fs.exists(u)}

    assert release_staged_files(state, 1) == [] and present() == {*first, second}
    # generation 2 activated and committed: its files go, although generations 3 and 4 carry them
    assert release_staged_files(state, 2) == sorted(first) and present() == {second}
    assert release_staged_files(state, 3) == [] and present() == {second}
    assert release_staged_files(state, 4) == [second] and present() == set()
    assert not any(state.storage.fs.ls(state.storage.path("staged", T.database, T.table))), "empty folders stay"
    assert release_staged_files(state, 2) == [], "an older committed generation releases nothing again"


def test_a_file_a_later_generation_adds_again_is_kept(tmp_path):
    state = PipelineState(str(tmp_path / "state"))
    part = splits(T, [])[0]
    url = state.staging_url(T) + "/a.parquet"
    write_staged(url, pa.table({"id": [1]}))
    state.commit(captured_tables([finish(part, 100, staged=url)]))   # 1
    state.commit({})                                                 # 2: T removed
    state.commit(captured_tables([finish(part, 100, staged=url)]))   # 3: the same split file added again
    assert release_staged_files(state, 1) == [] and state.storage.fs.exists(url)
    assert release_staged_files(state, 3) == [url] and not state.storage.fs.exists(url)
