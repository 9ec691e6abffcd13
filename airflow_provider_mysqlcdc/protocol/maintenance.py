"""Delta table maintenance between the maintenance task and the stream: what to do (a policy), a
task's request to the running stream, and what was done (sinks/delta/maintenance.py does it,
state/maintenance.py carries requests and reports through the state location)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.protocol.envelope import RecordFormat

#: files of about this size come out of compaction (the stream's clustering target too)
DEFAULT_TARGET_FILE_BYTES = 128 << 20
#: compaction rewrites a file alone once this share of its rows is deleted (by a Delta deletion vector
#: or Iceberg position deletes): readers stop skipping them, the file stops carrying them
DEFAULT_FOLD_SHARE = 0.2


@dataclass(frozen=True)
class MaintenancePolicy:
    """What one maintenance run does to each table.

    ``compact``: rewrite a mirror table's small and overlapping files in chunk-key order (the
    clustering the stream's merges prune by), and bin-pack a changelog table's small files.
    ``checkpoint``: write a Delta checkpoint and drop log files past the table's log retention.
    ``vacuum_retention_s``: delete the data files that left the table longer ago than this (time
    travel to versions within it keeps working); None: no vacuum.
    ``target_file_bytes``: the size of the files compaction writes.
    ``fold_share``: compaction rewrites a file whose rows merge-on-read deleted at least this share
    of (a Delta deletion vector, Iceberg position deletes) without them, whatever its neighbours."""

    compact: bool = True
    checkpoint: bool = True
    vacuum_retention_s: float | None = None
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    fold_share: float = DEFAULT_FOLD_SHARE

    def __post_init__(self) -> None:
        if self.vacuum_retention_s is not None and self.vacuum_retention_s < 0:
            raise ConfigurationError(f"The vacuum retention must be 0 or more seconds, got {self.vacuum_retention_s}; "
                                     "leave it unset for no vacuum.")
        if self.target_file_bytes < 1 << 20:
            raise ConfigurationError(f"The target file size must be at least 1 MiB, got {self.target_file_bytes} bytes.")
        if not 0 < self.fold_share <= 1:
            raise ConfigurationError(f"The fold share must be above 0 and at most 1 (a share of a file's rows), got "
                                     f"{self.fold_share}; {DEFAULT_FOLD_SHARE} folds a file once a fifth of its rows "
                                     "are deleted.")

    def to_body(self) -> dict[str, Any]:
        return {"compact": self.compact, "checkpoint": self.checkpoint, "vacuum_retention_s": self.vacuum_retention_s,
                "target_file_bytes": self.target_file_bytes, "fold_share": self.fold_share}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "MaintenancePolicy":
        return cls(bool(body["compact"]), bool(body["checkpoint"]), body.get("vacuum_retention_s"),
                   int(body.get("target_file_bytes", DEFAULT_TARGET_FILE_BYTES)),
                   float(body.get("fold_share", DEFAULT_FOLD_SHARE)))

    def __str__(self) -> str:
        done = [w for w, on in (("compact", self.compact), ("checkpoint", self.checkpoint)) if on]
        if self.vacuum_retention_s is not None:
            done.append(f"vacuum (retention {self.vacuum_retention_s:g}s)")
        return ", ".join(done) or "nothing"


@dataclass(frozen=True)
class MaintenanceRequest:
    """A task asks the stream that holds the pipeline's lease to maintain tables between two batches."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("maintenance-request", 1)

    request_id: str
    policy: MaintenancePolicy
    tables: list[str]  # db.table, quoted as TableId.quoted; empty: every table the stream captures
    requested_by: str
    requested_at: float

    def to_body(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "policy": self.policy.to_body(), "tables": self.tables,
                "requested_by": self.requested_by, "requested_at": self.requested_at}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "MaintenanceRequest":
        return cls(body["request_id"], MaintenancePolicy.from_body(body["policy"]), list(body["tables"]),
                   body["requested_by"], float(body["requested_at"]))


@dataclass(frozen=True)
class TableMaintenance:
    """What a run did to one Delta table (a mirror, or its changelog)."""

    table: str  # the Delta table's location
    files_before: int
    files_after: int
    files_rewritten: int = 0
    files_vacuumed: int = 0
    checkpoint_version: int | None = None
    #: what was left undone, and why (a compaction that gave way to concurrent commits)
    note: str = ""
    #: of the files rewritten, those rewritten alone to drop the rows merge-on-read deleted
    files_folded: int = 0

    def to_body(self) -> dict[str, Any]:
        return {"table": self.table, "files_before": self.files_before, "files_after": self.files_after,
                "files_rewritten": self.files_rewritten, "files_vacuumed": self.files_vacuumed,
                "checkpoint_version": self.checkpoint_version, "note": self.note, "files_folded": self.files_folded}

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "TableMaintenance":
        return cls(**body)

    def __str__(self) -> str:
        checkpoint = f", checkpoint at version {self.checkpoint_version}" if self.checkpoint_version is not None else ""
        note = f" ({self.note})" if self.note else ""
        folded = f" ({self.files_folded} to drop deleted rows)" if self.files_folded else ""
        return (f"{self.table}: {self.files_before} -> {self.files_after} data files, {self.files_rewritten} "
                f"rewritten{folded}, {self.files_vacuumed} vacuumed{checkpoint}{note}")


@dataclass(frozen=True)
class MaintenanceReport:
    """What one maintenance run did: the maintenance task's XCom value, and the stream's answer to a request."""

    FORMAT: ClassVar[RecordFormat] = RecordFormat("maintenance-report", 1)

    request_id: str
    done_by: str  # "the stream <app id>", or the task
    policy: MaintenancePolicy
    tables: list[TableMaintenance] = field(default_factory=list)
    seconds: float = 0.0

    def to_body(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "done_by": self.done_by, "policy": self.policy.to_body(),
                "tables": [t.to_body() for t in self.tables], "seconds": self.seconds}

    @classmethod
    def from_body(cls, body: dict[str, Any], version: int) -> "MaintenanceReport":
        return cls(body["request_id"], body["done_by"], MaintenancePolicy.from_body(body["policy"]),
                   [TableMaintenance.from_body(t) for t in body["tables"]], float(body["seconds"]))
