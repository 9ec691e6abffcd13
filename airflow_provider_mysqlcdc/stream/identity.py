"""The stream's identity, kept in its checkpoint folder (a deleted checkpoint takes it along): the app
id its sink commits carry (sinks/base.py ``StreamCommit``), and where its batches start.

- Structured Streaming's (``stream_identity``, ``mysqlcdc-stream.json`` beside Spark's offsets): a new
  checkpoint also records where its first batch starts, since Spark asks the source for that again
  when it re-runs a batch 0 that did not commit.
- The driver loop's (``driver_identity``, ``mysqlcdc-driver.json``, loop.py): its app id and the id of
  its first batch; what Structured Streaming left in the folder is removed first.
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
from airflow_provider_mysqlcdc.protocol.progress import CheckpointIdentity, StreamBatchProgress
from airflow_provider_mysqlcdc.state.registry import STREAM_PROGRESS, PipelineState

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


#: the driver loop's identity, a file of ours in the checkpoint folder (Spark's own files are removed)
DRIVER_IDENTITY = "mysqlcdc-driver.json"


def driver_identity(checkpoint: str, state: PipelineState, app_id: str = "") -> tuple[str, int]:
    """The driver loop's app id (kept in ``checkpoint``, or ``app_id`` where the job names one) and the
    id of its first batch, never one a table may hold already: a table holds at most the batch after
    the last one whose progress was recorded (a kill -9 between its commits and its record), and a
    stream whose last recorded batch is not its own gets a new app id. What Structured Streaming
    left in ``checkpoint`` is removed first: its offsets stop where the loop took over, so a later
    Structured Streaming run must find a new checkpoint, which starts where the loop's last batch
    ended (``resume_offset``)."""
    fs, path = fsspec.core.url_to_fs(checkpoint)
    path = path.rstrip("/")
    file = f"{path}/{DRIVER_IDENTITY}"
    if fs.exists(path):
        for entry in fs.ls(path, detail=False):
            if entry.rstrip("/").rsplit("/", 1)[-1] != DRIVER_IDENTITY:
                log.info("removing the Structured Streaming checkpoint's %s: the driver loop records its own position",
                         entry)
                fs.rm(entry, recursive=True)
    if not app_id and fs.exists(file):
        with fs.open(file, "r") as f:
            app_id = decode(CheckpointIdentity, json.load(f), f"{checkpoint.rstrip('/')}/{DRIVER_IDENTITY}").app_id
    last = state.read_progress(StreamBatchProgress, STREAM_PROGRESS)
    if app_id and last is not None and last.app_id == app_id:
        return app_id, last.batch + 2
    app_id = f"mysqlcdc-{uuid.uuid4().hex[:16]}"  # no table holds a batch of it
    fs.makedirs(path, exist_ok=True)
    with fs.open(file, "w") as f:
        json.dump(encode(CheckpointIdentity(app_id, None, time.time())), f)
    return app_id, 0
