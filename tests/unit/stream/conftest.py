"""Every test of the stream's rules runs on each sink format, and each merge mode of a format that has
several: the rules are the format's contract. A module that touches no sink says so
(``SINK_INDEPENDENT = True``) and runs once."""

from __future__ import annotations

import pytest

from tests.unit.stream.harness import SINK_FORMAT, SINK_VARIANTS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sink_format" in metafunc.fixturenames and not getattr(metafunc.module, "SINK_INDEPENDENT", False):
        metafunc.parametrize("sink_format", SINK_VARIANTS, indirect=True)


@pytest.fixture(autouse=True)
def sink_format(request):
    SINK_FORMAT.value = getattr(request, "param", "delta")
    yield SINK_FORMAT.value
    SINK_FORMAT.value = "delta"
