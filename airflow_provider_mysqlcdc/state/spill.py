"""Spill files: parts of a micro-batch too large to travel through Spark to the driver.

An executor decoding a large binlog range writes what exceeds its inline budget to files under
``<state>/spill/<folder>/`` (one folder per planned micro-batch), as a sequence of pickled items,
and tells the driver only their names. The driver reads them back one item at a time and removes
the folder once the batch is applied; files of failed task attempts share that folder and go with
it. A stream start removes every folder a crashed batch left (one stream runs per pipeline).
The state location must therefore be shared by the driver and the executors, as it is for the
registry.
"""

from __future__ import annotations

import logging
import pickle
import uuid
from collections.abc import Iterator
from typing import Any, BinaryIO

from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.storage import file_system

log = logging.getLogger(__name__)

SPILL = "spill"


def new_spill_folder(state: PipelineState) -> str:
    """A fresh folder's URL for one micro-batch's spill files (created when first written)."""
    return state.storage.url(SPILL, uuid.uuid4().hex)


class SpillWriter:
    """Appends pickled items to one new file in ``folder``."""

    def __init__(self, folder: str):
        self.url = f"{folder.rstrip('/')}/{uuid.uuid4().hex}.pickle"
        fs, path = file_system(self.url)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self._file: BinaryIO = fs.open(path, "wb")
        self.bytes = 0

    def write(self, item: Any) -> None:
        data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.write(data)
        self.bytes += len(data)

    def close(self) -> None:
        self._file.close()


def read_spill_file(url: str) -> Iterator[Any]:
    """The items of one spill file, one at a time."""
    fs, path = file_system(url)
    with fs.open(path, "rb") as f:
        while True:
            try:
                yield pickle.load(f)
            except EOFError:
                return


def remove_spill_folder(url: str) -> None:
    fs, path = file_system(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def remove_all_spill_folders(state: PipelineState) -> None:
    """What batches that never finished left behind (called before a stream starts)."""
    if state.storage.exists(SPILL):
        log.info("removing spill files left by an earlier stream run at %s", state.storage.url(SPILL))
        remove_spill_folder(state.storage.url(SPILL))
