"""The stream job's settings are checked before anything runs."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec


@pytest.mark.parametrize("limit", [{"max_batch_bytes": -1}, {"max_batch_events": -5}, {"inline_bytes": -1},
                                   {"max_apply_changes": 0}])
def test_a_negative_or_zero_memory_limit_is_refused_with_its_name(limit):
    with pytest.raises(ConfigurationError, match=next(iter(limit))):
        StreamJob(state="/tmp/state", sink=SinkSpec("/tmp/lake"), **limit)
