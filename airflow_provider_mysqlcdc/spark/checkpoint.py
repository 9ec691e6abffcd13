"""The stream query's Spark checkpoint on a local disk, written without a process per file.

Spark writes two small files into the checkpoint per micro-batch (the batch's offsets, then its
commit). On a local path Hadoop's default file system (``LocalFileSystem``, checksummed) writes a
``.crc`` file beside each, and without Hadoop's native library (Spark's packages ship none) it runs
``chmod`` as a process for every file it creates and ``readlink`` for every status check of a
rename: measured, about 18 processes per micro-batch, a good part of the driver JVM's CPU at a
trickle of changes. So for a local checkpoint the stream's session writes through the raw local file
system (no ``.crc`` files: the offsets are small JSON files Spark parses, and exactly-once rests on the
positions committed with the sink's data, not on the checkpoint) and Spark's file-system-based
checkpoint manager, whose rename is the file system's own: two ``chmod`` processes per batch are left.

They are session settings: Spark copies a session's settings into the Hadoop configuration it opens
the checkpoint with, on spark-submit and Spark Connect sessions alike. A checkpoint on HDFS or an
object store keeps Spark's defaults.
"""

from __future__ import annotations

from typing import Any

#: Spark's checkpoint manager that renames through the file system itself (no link status checks)
FILE_SYSTEM_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
#: the settings of a local checkpoint (``local_checkpoint_settings``)
LOCAL_SETTINGS = {
    "spark.sql.streaming.checkpointFileManagerClass": FILE_SYSTEM_MANAGER,
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    # the local file system Spark opened before, checksummed, is cached by scheme: this session's differs
    "fs.file.impl.disable.cache": "true",
}


def local_checkpoint_settings(checkpoint: str) -> dict[str, str]:
    """The session settings that write ``checkpoint`` cheaply: ``LOCAL_SETTINGS`` for a path of the
    driver's disk (no scheme, or ``file:``), none for any other place."""
    scheme = checkpoint.split(":", 1)[0].lower() if ":" in checkpoint.split("/", 1)[0] else ""
    return dict(LOCAL_SETTINGS) if scheme in ("", "file") else {}


def apply_local_checkpoint_settings(spark: Any, checkpoint: str) -> None:
    """Set ``local_checkpoint_settings`` on the session ``spark`` before its query starts."""
    for key, value in local_checkpoint_settings(checkpoint).items():
        spark.conf.set(key, value)
