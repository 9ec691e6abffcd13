"""Every test of the stream's rules runs on each sink format, and each merge mode of a format that has
several: the rules are the format's contract."""

from __future__ import annotations

import pytest

from tests.unit.stream.harness import SINK_FORMAT, SINK_VARIANTS


@pytest.fixture(autouse=True, params=SINK_VARIANTS)
def sink_format(request):
    SINK_FORMAT.value = request.param
    yield request.param
    SINK_FORMAT.value = "delta"
