"""The stream's identity, kept in its checkpoint folder (a deleted checkpoint takes it along): the app
id its sink commits carry (sinks/base.py ``StreamCommit``), and where its batches start.

- Structured Streaming's (``stream_identity``, ``mysqlcdc-stream.json`` beside Spark's offsets): a new
  checkpoint also records where its first batch starts, since Spark asks the source for that again
  when it re-runs a batch 0 that did not commit.
- The driver loop's (``driver_identity``, loop.py): a new app id for each run, its batches from 0;
  what Structured Streaming left in the folder is removed first.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import fsspec

from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset
from airflow_provider_mysqlcdc.protocol.progress import CheckpointIdentity

log = logging.getLogger(__name__)

#: Structured Streaming's identity, a file of ours inside Spark's checkpoint folder
CHECKPOINT_IDENTITY = "mysqlcdc-stream.json"


@dataclass(frozen=True)
class StreamIdentity:
    app_id: str  # the app id of the stream's Delta txn actions
    initial_offset: StreamOffset | None  # where batch 0 starts, the same if Spark runs batch 0 again
    new: bool  # the checkpoint was created now


def stream_identity(checkpoint: str, first_offset: Callable[[], StreamOffset]) -> StreamIdentity:
    """The stream's identity, kept in a file of ours inside its checkpoint (a deleted checkpoint takes
    it along). A new checkpoint also records where its first batch starts (``first_offset()``):
    Spark asks the source for that again when it re-runs a batch 0 that did not commit, and the
    registry may have moved on meanwhile."""
    fs, path = fsspec.core.url_to_fs(checkpoint)
    path = path.rstrip("/")
    file = f"{path}/{CHECKPOINT_IDENTITY}"
    if fs.exists(file):
        with fs.open(file, "r") as f:
            known = decode(CheckpointIdentity, json.load(f), f"{checkpoint.rstrip('/')}/{CHECKPOINT_IDENTITY}")
        return StreamIdentity(known.app_id, known.initial_offset, False)
    new = not (fs.exists(f"{path}/offsets") and fs.ls(f"{path}/offsets", detail=False))
    identity = StreamIdentity(f"mysqlcdc-{uuid.uuid4().hex[:16]}", first_offset() if new else None, new)
    fs.makedirs(path, exist_ok=True)
    with fs.open(file, "w") as f:
        json.dump(encode(CheckpointIdentity(identity.app_id, identity.initial_offset, time.time())), f)
    return identity


def driver_identity(checkpoint: str, app_id: str = "") -> tuple[str, int]:
    """The driver loop's app id and the id of its first batch: a new app id for each run (unless the
    job names one), numbering its batches from 0, so no run's batch id is one a table may hold
    already, however many runs were killed before recording a batch. What Structured Streaming left
    in ``checkpoint`` is removed first, its offsets before the rest: they stop where the loop took
    over, so a later Structured Streaming run must find a new checkpoint, which starts where the
    loop's last batch ended (``resume_offset``)."""
    fs, path = fsspec.core.url_to_fs(checkpoint)
    path = path.rstrip("/")
    if fs.exists(path):
        entries = [e for e in fs.ls(path, detail=False) if e.rstrip("/") != path]  # not an object store's marker
        for entry in sorted(entries, key=lambda e: e.rstrip("/").rsplit("/", 1)[-1] != "offsets"):
            log.info("removing the Structured Streaming checkpoint's %s: the driver loop records its own position",
                     entry)
            fs.rm(entry, recursive=True)
    return app_id or f"mysqlcdc-{uuid.uuid4().hex[:16]}", 0
