"""Files at a state location: a local path or any fsspec URL (``s3://bucket/prefix``, ``gs://...``).

Local paths need nothing; object stores need their fsspec package (s3fs, gcsfs, adlfs) on every
host that runs a task, a Spark driver or an executor. Writes go to a temporary name first and are
then moved, so a reader never sees half a file on a local disk.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, TypeVar

import fsspec

from airflow_provider_mysqlcdc.protocol.envelope import Record, decode, encode
from airflow_provider_mysqlcdc.sinks.data_files import put_if_absent

R = TypeVar("R")


def file_system(url: str, storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The file system of ``url`` and the path in it. On an object store its listings are never
    cached: other processes (the stream, chunk jobs, a second stream racing for the lease) write
    the same folders, and a cached listing would hide their files."""
    options = dict(storage_options or {})
    if fsspec.core.split_protocol(url)[0] not in (None, "file", "local"):
        options.setdefault("use_listings_cache", False)
    return fsspec.core.url_to_fs(url, **options)


class StateStorage:
    def __init__(self, location: str, storage_options: dict[str, Any] | None = None):
        self.location = location.rstrip("/")
        self.fs, self.root = file_system(self.location, storage_options)

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def url(self, *parts: str) -> str:
        """The location of ``parts`` as the user wrote it (URL or path), for other processes."""
        return "/".join([self.location, *parts])

    def exists(self, *parts: str) -> bool:
        return self.fs.exists(self.path(*parts))

    def read_text(self, *parts: str) -> str:
        with self.fs.open(self.path(*parts), "r") as f:
            return f.read()

    def write_text(self, text: str, *parts: str) -> None:
        target = self.path(*parts)
        self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        temporary = f"{target}.{uuid.uuid4().hex}.tmp"
        with self.fs.open(temporary, "w") as f:
            f.write(text)
        self.fs.mv(temporary, target)

    def create_exclusive(self, text: str, *parts: str) -> bool:
        """Write ``text`` at ``parts`` only if nothing is there yet, atomically and whole: False when
        something was (another writer won): ``put_if_absent``."""
        target = self.path(*parts)
        self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        return put_if_absent(self.fs, target, text.encode())

    def read_record(self, cls: type[R], *parts: str) -> R | None:
        """The ``cls`` record (protocol/) stored at ``parts``, None when there is none."""
        if not self.exists(*parts):
            return None
        return decode(cls, json.loads(self.read_text(*parts)), self.url(*parts))

    def write_record(self, record: Record, *parts: str, indent: int | None = None) -> None:
        self.write_text(json.dumps(encode(record), indent=indent), *parts)

    def create_record(self, record: Record, *parts: str, indent: int | None = None) -> bool:
        """``write_record`` only where no record stands yet (``create_exclusive``): False when one did."""
        return self.create_exclusive(json.dumps(encode(record), indent=indent), *parts)

    def remove(self, *parts: str) -> None:
        """Delete the file at ``parts``; nothing when there is none."""
        try:
            self.fs.rm(self.path(*parts))
        except FileNotFoundError:
            pass

    def list_names(self, *parts: str) -> list[str]:
        directory = self.path(*parts)
        if not self.fs.exists(directory):
            return []
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(directory, detail=False))
