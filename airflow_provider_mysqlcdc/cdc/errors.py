"""Every error the package raises on purpose, in one tree under ``CdcError``. Each message names
the problem and the fix.

    CdcError
    ├── ConfigurationError      a parameter or a setting is malformed or inconsistent
    │   └── ProtocolError       a record is not what its place should hold (protocol/)
    │       └── ProtocolVersionError
    ├── PreflightError          the source is not set up for CDC
    │   └── PreflightFailures
    ├── BinlogPurgedError       binlog a reader needs is gone
    ├── SourceChangedError      offsets beyond the server's binlog
    ├── SchemaChangedError      a schema change that cannot be followed (a table's fault)
    ├── SourceUnavailableError  the source stayed unreachable past the retry budget
    ├── ConcurrentStateChange   two writers raced for one registry generation (state/)
    ├── ConcurrentCommit        another writer took the table version a sink commit was to be (retried)
    ├── StreamAlreadyRunning    another live stream holds the pipeline's lease (state/lease.py)
    ├── LeaseLost               this stream's lease was taken over (state/lease.py)
    ├── SparkJobFailed          a Spark program failed (spark/, hooks/)
    ├── MaintenanceNotAnswered  the running stream did not answer a maintenance request
    ├── PlanNotFinished         a DAG run's plan task failed: nothing of the run lands
    └── InternalError           a broken invariant of the provider itself (a bug: please report it)
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset


class CdcError(Exception):
    """Base class for every error this package raises on purpose."""


class PreflightError(CdcError):
    """The source server or a table is not set up for CDC; the message says how to fix it."""


class PreflightFailures(PreflightError):
    """Several preflight checks failed; all are listed so that one round of fixes suffices."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"The source is not ready for CDC ({len(self.problems)} problem(s)):\n{lines}")


class ConfigurationError(CdcError):
    """A parameter given by the user is malformed or inconsistent."""


class BinlogPurgedError(CdcError):
    """The binlog file a reader needs is no longer on the server. ``missing`` is the offset (or GTID
    position) the reader needed, ``oldest`` the first offset the server still has (None: it has no binlog)."""

    def __init__(self, message: str, missing: object = None, oldest: BinlogOffset | None = None):
        super().__init__(message)
        self.missing = missing
        self.oldest = oldest


class SourceChangedError(CdcError):
    """Offsets point beyond the server's binlog: it was reset (RESET MASTER), restored, or is another server."""


class SchemaChangedError(CdcError):
    """A table's schema changed in a way the reader cannot follow safely."""


class SchemaChangeRefused(CdcError):
    """A DDL statement of a captured table, refused by ``schema_changes="fail"`` before any of it was
    applied: the stream stops there, and goes on once a run follows it with another policy."""


class SourceUnavailableError(CdcError):
    """The source stayed unreachable for longer than the retry budget (cdc/source/retry.py)."""


class ProtocolError(ConfigurationError):
    """A record that is not what its place should hold, or is malformed."""


class ProtocolVersionError(ProtocolError):
    """A record written by a newer version of the provider than the one reading it."""


class ConcurrentStateChange(CdcError):
    """Two writers raced for the same generation number."""


class ConcurrentCommit(CdcError):
    """Another writer committed the table version a sink's commit was to be: nothing of this commit
    is in the table, and its writer plans it again (sinks/delta/log.py)."""


class StreamAlreadyRunning(CdcError):
    """Another stream holds the pipeline's lease and is alive."""


class LeaseLost(CdcError):
    """This stream's lease was taken over by another stream: this one must stop writing."""


class SparkJobFailed(CdcError):
    """A Spark program failed; the message carries its own error when it reported one."""


class MaintenanceNotAnswered(CdcError):
    """The running stream did not answer a maintenance request in time."""


class PlanNotFinished(CdcError):
    """A plan task of the DAG run did not finish: nothing of the run lands."""


class LibraryNeeded(CdcError):
    """What our own binlog framing met needs python-mysql-replication: a server or connection it does
    not read (MySQL, TLS), or rows no row decoder takes (binlog/framing.py). The reader reads on
    through the library from its last transaction boundary, as after a transient fault (nothing is
    handed out twice); never raised out of the reader."""


class InternalError(CdcError):
    """An invariant of the provider itself does not hold: a bug, never the user's input."""


def is_table_fault(exc: BaseException) -> bool:
    """Whether an error raised while decoding, typing or writing one table's changes belongs to that
    table's data or schema (a value that cannot be decoded or represented, a key that cannot be
    encoded, a schema that cannot be followed), so that the stream freezes that table and goes on
    with the others. Never the source's, the storage's or the pipeline's own errors: an ``OSError``
    or a database error anywhere in the chain, our other ``CdcError``s, or running out of memory."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (OSError, MemoryError)) or type(cause).__module__.startswith("pymysql"):
            return False
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, SchemaChangedError):
        return True
    if isinstance(exc, CdcError):
        return False
    return isinstance(exc, (ValueError, TypeError, LookupError, ArithmeticError, NotImplementedError, struct.error))


def describe_error(exc: BaseException, limit: int = 500) -> str:
    """An error as a drift reason or log line: its type and the start of its message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"
