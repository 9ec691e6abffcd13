"""Headless Chromium (Debian's ``chromium``) for tests: a page's DOM after its scripts ran, and a screenshot.

Each call starts a browser of its own with a throwaway profile, so nothing is shared between calls.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

#: how long (virtual time) a page's scripts may run before the DOM is read or the screenshot taken
SCRIPT_BUDGET_MS = 15000


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    browser = chromium()
    if browser is None:
        raise RuntimeError("chromium is not installed: apt-get install chromium (bin/setup does)")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        # --no-sandbox: the tests may run as root, where Chromium's sandbox refuses to start
        return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                               f"--user-data-dir={profile}", "--hide-scrollbars",
                               f"--virtual-time-budget={SCRIPT_BUDGET_MS}", *args],
                              capture_output=True, text=True, timeout=timeout_s, check=True)


def dump_dom(url: str, timeout_s: float = 120) -> str:
    """The page's DOM, serialised, once its scripts ran."""
    return _run(["--dump-dom", url], timeout_s).stdout


def screenshot(url: str, path: Path, *, width: int = 1280, height: int = 1600, timeout_s: float = 120) -> Path:
    """A PNG of the page at ``width`` x ``height``."""
    _run([f"--screenshot={path}", f"--window-size={width},{height}", url], timeout_s)
    if not path.exists():
        raise RuntimeError(f"chromium wrote no screenshot of {url}")
    return path
