"""Releasing staged split files once no stream restart can need them.

A staged file is read when the stream activates the generation that added its split. Once the
stream's checkpoint has committed a batch that *started* at a generation ``g`` (so every generation
up to ``g`` was activated and committed), no restart replays those activations: the files their
splits added are garbage, unless a later, not yet activated generation adds the same file again.
Later generations carry the same split forward unchanged, but carrying is not adding: only added
splits are read. Called by the stream job after each micro-batch; the next run picks up where a
crashed one stopped (``progress/staged-released.json``).
"""

from __future__ import annotations

import logging
import time

from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.progress import StagedRelease
from airflow_provider_mysqlcdc.state.generations import added_since
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.staged import delete_staged

log = logging.getLogger(__name__)

RELEASED = "staged-released.json"


def release_staged_files(state: PipelineState, committed_generation: int) -> list[str]:
    """Delete the staged files of generations up to ``committed_generation``; returns their URLs."""
    released_before = state.read_progress(StagedRelease, RELEASED)
    through = released_before.through if released_before else 0
    if committed_generation <= through:
        return []
    latest = state.latest_number()
    released = _staged_added(state, through + 1, committed_generation)
    still_needed = _staged_added(state, committed_generation + 1, latest)
    deleted = sorted(released - still_needed)
    for url in deleted:
        delete_staged(url)
    state.write_progress(RELEASED, StagedRelease(committed_generation, time.time()))
    if deleted:
        log.info("released %d staged split file(s) the stream applied (generations %d-%d)", len(deleted),
                 through + 1, committed_generation)
    return deleted


def _staged_added(state: PipelineState, first: int, last: int) -> set[str]:
    urls: set[str] = set()
    if first > last:
        return urls
    previous = state.load(first - 1)
    for number in range(first, last + 1):
        current = state.load(number)
        urls.update(f.staged for f in added_since(current, previous) if f.staged)
        previous = current
    return urls


def release_applied_staged_files(state: PipelineState, committed: StreamOffset | None) -> None:
    """Delete staged files no restart from a checkpoint at ``committed`` can read."""
    if not committed:
        return
    try:
        release_staged_files(state, committed.generation)
    except Exception as exc:  # never stop the stream for housekeeping: the files stay until the next batch
        log.warning("could not release staged split files yet: %s", exc)
