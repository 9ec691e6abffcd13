"""What several unit-test folders share."""

from __future__ import annotations

import pytest


@pytest.fixture
def where(tmp_path):
    """A pipeline's state location and the report folder of a detached stream of run r1 in it."""
    state = str(tmp_path / "state")
    return state, f"{state}/runs/r1/spark/stream--1-1"
