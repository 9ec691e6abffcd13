"""Errors the core raises. Each message names the problem and the fix."""

from __future__ import annotations


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
    """The binlog file a reader needs is no longer on the server. ``missing`` is the offset the
    reader needed, ``oldest`` the first offset the server still has (None: it has no binlog)."""

    def __init__(self, message: str, missing: object = None, oldest: object = None):
        super().__init__(message)
        self.missing = missing
        self.oldest = oldest


class SourceChangedError(CdcError):
    """Offsets point beyond the server's binlog: it was reset (RESET MASTER), restored, or is another server."""


class SchemaChangedError(CdcError):
    """A table's schema changed in a way the reader cannot follow safely."""


class SourceUnavailableError(CdcError):
    """The source stayed unreachable for longer than the retry budget (cdc/source/retry.py)."""
