"""Delta deletion vectors: which rows of a data file are no longer in the table, without rewriting it.

The Delta protocol's format ("Deletion Vector Format"), written and read here byte for byte:

- the rows are a 64-bit roaring bitmap of row positions in the file, serialized as a
  ``RoaringBitmapArray`` (an int64 count of 32-bit bitmaps, each an int32 key of the high bits and
  the portable serialization of its low bits: CRoaring's 64-bit portable format) after the magic
  number 1681511377 (little endian);
- a deletion vector file (``deletion_vector_<uuid>.bin`` in the table's folder) starts with a version
  byte (1); each vector in it is its size (big endian int32), its bytes and their CRC-32 (big endian);
- an ``add`` or ``remove`` action names a vector by a descriptor: storage type ``u`` (a file named by
  the z85 text of its UUID, relative to the table), the vector's ``offset`` in that file, its
  ``sizeInBytes`` (magic and bitmap) and ``cardinality`` (rows it deletes).

A merge writes the vectors of one commit into one new file; nothing reads a vector until a commit
names it, so the file of a commit that never landed is an orphan that vacuum removes.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
from pyroaring import BitMap64

#: the magic number of the portable RoaringBitmapArray format
MAGIC = 1681511377
_FORMAT_VERSION = 1
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = {c: i for i, c in enumerate(_Z85)}


@dataclass(frozen=True)
class DeletionVector:
    """A deletion vector descriptor, as an ``add`` or ``remove`` action carries it."""

    storage_type: str  # 'u': a file relative to the table, 'p': an absolute path, 'i': inline
    path_or_inline: str
    offset: int | None
    size: int
    cardinality: int

    @property
    def unique_id(self) -> str:
        """The protocol's identity of the vector: a file is in the table once per (path, unique id)."""
        return self.storage_type + self.path_or_inline + ("" if self.offset is None else f"@{self.offset}")

    def to_json(self) -> dict[str, Any]:
        action: dict[str, Any] = {"storageType": self.storage_type, "pathOrInlineDv": self.path_or_inline,
                                  "sizeInBytes": self.size, "cardinality": self.cardinality}
        if self.offset is not None:
            action["offset"] = self.offset
        return action

    @classmethod
    def from_json(cls, action: Mapping[str, Any]) -> "DeletionVector":
        offset = action.get("offset")
        return cls(action["storageType"], action["pathOrInlineDv"], None if offset is None else int(offset),
                   int(action["sizeInBytes"]), int(action["cardinality"]))

    @property
    def relative_path(self) -> str | None:
        """The vector's file relative to the table's folder (storage type ``u``: its random prefix, a
        folder, then the name its UUID gives it); None for an inline vector or an absolute path."""
        if self.storage_type != "u":
            return None
        prefix, encoded = self.path_or_inline[:-20], self.path_or_inline[-20:]
        return "/".join(p for p in (prefix, f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin") if p)

    def file_path(self, table_uri: str) -> str:
        """Where the vector's file is (not for an inline vector)."""
        if self.storage_type == "p":
            return self.path_or_inline
        if self.relative_path is None:
            raise ValueError("an inline deletion vector has no file")
        return f"{table_uri.rstrip('/')}/{self.relative_path}"


def serialize(positions: BitMap64) -> bytes:
    """A vector's bytes: the magic number and the bitmap (``sizeInBytes`` counts these)."""
    return struct.pack("<I", MAGIC) + positions.serialize()


def deserialize(data: bytes) -> BitMap64:
    (magic,) = struct.unpack_from("<I", data)
    if magic != MAGIC:
        raise ValueError(f"not a portable RoaringBitmapArray deletion vector (magic number {magic})")
    return BitMap64.deserialize(data[4:])


def write_vectors(table_uri: str, vectors: Mapping[str, BitMap64]) -> tuple[str, dict[str, DeletionVector]]:
    """Write the ``vectors`` (by data file path) into one new deletion vector file in the table's
    folder; the file's path and each data file's descriptor of its vector."""
    file_id = uuid.uuid4()
    content = bytearray([_FORMAT_VERSION])
    descriptors = {}
    for path, positions in vectors.items():
        data = serialize(positions)
        descriptors[path] = DeletionVector("u", z85_encode(file_id.bytes), len(content), len(data), len(positions))
        content += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    fs, root = fsspec.core.url_to_fs(table_uri)
    location = f"{root.rstrip('/')}/deletion_vector_{file_id}.bin"
    with fs.open(location, "wb") as handle:
        handle.write(bytes(content))
    return f"deletion_vector_{file_id}.bin", descriptors


def read_vector(table_uri: str, descriptor: DeletionVector) -> BitMap64:
    """The row positions ``descriptor`` deletes, checked against its size, checksum and cardinality."""
    if descriptor.storage_type == "i":
        data = z85_decode(descriptor.path_or_inline)[:descriptor.size]
    else:
        fs, path = fsspec.core.url_to_fs(descriptor.file_path(table_uri))
        with fs.open(path, "rb") as handle:
            handle.seek(descriptor.offset or 0)
            framed = handle.read(descriptor.size + 8)
        (size,) = struct.unpack_from(">i", framed)
        data = framed[4:4 + size]
        (checksum,) = struct.unpack_from(">I", framed, 4 + size)
        if size != descriptor.size or zlib.crc32(data) != checksum:
            raise ValueError(f"deletion vector {descriptor.unique_id} of {table_uri} is damaged")
    positions = deserialize(data)
    if len(positions) != descriptor.cardinality:
        raise ValueError(f"deletion vector {descriptor.unique_id} of {table_uri} holds {len(positions)} rows, "
                         f"its descriptor says {descriptor.cardinality}")
    return positions


def kept_mask(deleted: BitMap64 | None, rows: int) -> np.ndarray:
    """A boolean per row of a file of ``rows`` rows: True where ``deleted`` does not hold it."""
    keep = np.ones(rows, dtype=bool)
    if deleted:
        keep[np.asarray(deleted.to_array(), dtype=np.int64)] = False
    return keep


def z85_encode(data: bytes) -> str:
    """ZeroMQ's Base85 (Z85) text of ``data`` (a multiple of 4 bytes)."""
    if len(data) % 4:
        raise ValueError("z85 encodes a multiple of 4 bytes")
    out: list[str] = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i:i + 4], "big")
        digits = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            digits.append(_Z85[digit])
        out.extend(reversed(digits))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    if len(text) % 5:
        raise ValueError("z85 text is a multiple of 5 characters")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for char in text[i:i + 5]:
            value = value * 85 + _Z85_VALUES[char]
        out += value.to_bytes(4, "big")
    return bytes(out)
