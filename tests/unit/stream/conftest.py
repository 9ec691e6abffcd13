"""Every test of the stream's rules runs on each sink format: the rules are the format's contract."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.sinks.factory import SINK_FORMATS
from tests.unit.stream.harness import SINK_FORMAT


@pytest.fixture(autouse=True, params=list(SINK_FORMATS))
def sink_format(request):
    SINK_FORMAT.value = request.param
    yield request.param
    SINK_FORMAT.value = "delta"
