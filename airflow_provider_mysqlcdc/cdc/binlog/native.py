"""The compiled twins of the binlog's hot loops, when ``mysqlcdc_rowcodec`` is installed.

``bin/setup`` builds that module with Cython from ``native/`` (a top-level module: Spark executors
load the provider from a zip of sources, where no extension can load). Each compiled piece has a
pure-Python twin beside its caller that gives the same results, slower: the row decoder
(row_decoder.py ``PythonRowDecoder``) and the framing's event cutter (dump.py ``cut_events``).
"""

from __future__ import annotations

from functools import cache
from types import ModuleType
from typing import Any


@cache
def compiled_module() -> ModuleType | None:
    """``mysqlcdc_rowcodec``, or None where it is not installed."""
    try:
        import mysqlcdc_rowcodec
    except ImportError:
        return None
    return mysqlcdc_rowcodec


def compiled(name: str) -> Any:
    """The compiled module's ``name``, or None where the module (or an older build without it) is missing."""
    return getattr(compiled_module(), name, None)
