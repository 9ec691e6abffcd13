"""The test suite's own tools (devtools/): what every integration test leans on."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from devtools.throwaway_server import stop_process_group


def test_stopping_a_service_ends_every_process_of_its_group_even_one_that_ignores_sigterm(tmp_path):
    ready = tmp_path / "child-ready"
    script = tmp_path / "service.py"
    script.write_text(
        "import signal, subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, sys, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); open(sys.argv[1], \"w\").close(); time.sleep(600)', "
        "sys.argv[1]])\n"
        "time.sleep(600)\n")
    service = subprocess.Popen([sys.executable, str(script), str(ready)], start_new_session=True)
    deadline = time.monotonic() + 60
    while not ready.exists():  # the child ignores SIGTERM from here on
        assert time.monotonic() < deadline, "the service's child never started"
        time.sleep(0.05)
    stop_process_group(service, timeout_s=2)
    assert service.returncode is not None
    assert not running_in_group(service.pid)


def running_in_group(group: int) -> list[int]:
    """The processes of ``group`` that still run (not those that ended)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found
