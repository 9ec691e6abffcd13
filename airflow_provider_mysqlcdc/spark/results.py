"""How a spark-submit program hands a machine-readable result back to its caller.

The result is written to the file named by ``--result`` (when the caller can read the driver's
disk: local and client deploy mode) and printed on stdout as one line starting with
``RESULT_MARKER`` (which the caller can always capture from the spark-submit output).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULT_MARKER = "MYSQLCDC_RESULT "
ERROR_MARKER = "MYSQLCDC_ERROR "


def publish_result(result: dict[str, Any], path: str | None) -> None:
    text = json.dumps(result, sort_keys=True)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    print(RESULT_MARKER + text, flush=True)


def parse_result(output: str) -> dict[str, Any]:
    """The last result line in a spark-submit output."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    raise ValueError("no result line in the job output (did the job fail before finishing?)")


def publish_error(exc: BaseException) -> None:
    """One stdout line naming the failure, so the caller shows it rather than a JVM log tail."""
    print(ERROR_MARKER + json.dumps({"type": type(exc).__name__, "message": str(exc)}), flush=True)


def parse_error(output: str) -> str | None:
    for line in reversed(output.splitlines()):
        if line.startswith(ERROR_MARKER):
            data = json.loads(line[len(ERROR_MARKER):])
            return f"{data['type']}: {data['message']}"
    return None
