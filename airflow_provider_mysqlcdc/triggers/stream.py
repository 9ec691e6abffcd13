"""``MySqlCdcStreamTrigger``: a deferred stream task's watch over its detached stream.

It runs in Airflow's triggerer, so the stream holds no worker slot. Every ``poll_interval_s`` it
reads the stream's report folder and the pipeline's lease (launch/supervision.py), puts the stream's
new log lines in the task log, and fires once the stream has ended (its result), failed (its own
error) or was lost (no heartbeat, driver gone, lease taken over). It sends the stream's metrics
meanwhile, as a task that follows its stream does (metrics/pipeline_metrics.py). Marking the task failed or
clearing it calls ``on_kill``, which asks the stream to stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async

from airflow_provider_mysqlcdc.hooks.object_store import storage_options_for
from airflow_provider_mysqlcdc.launch.supervision import DetachedStream
from airflow_provider_mysqlcdc.metrics.pipeline_metrics import StreamMetrics
from airflow_provider_mysqlcdc.protocol.envelope import encode
from airflow_provider_mysqlcdc.protocol.results import StreamPhase
from airflow_provider_mysqlcdc.state.registry import PipelineState

STOP_REASON = "its Airflow task was marked failed, cleared or timed out"


class MySqlCdcStreamTrigger(BaseTrigger):
    """Fires with a ``StreamStatus`` record once the detached stream is no longer running.

    :param state: the pipeline's state location
    :param report: the stream's report folder
    :param submitted_at: when it was submitted (epoch seconds)
    :param poll_interval_s: how often to look
    :param start_timeout_s: how long it may take to hold the pipeline's lease
    :param aws_conn_id: the ``aws`` connection of a state location on an object store (its
        credentials are read in the triggerer, and given to this trigger's reads alone: other
        triggers in the same process may watch pipelines on other stores)
    """

    def __init__(self, *, state: str, report: str, submitted_at: float, poll_interval_s: float = 2.0,
                 start_timeout_s: float = 600.0, aws_conn_id: str | None = None) -> None:
        super().__init__()
        self.state = state
        self.report = report
        self.submitted_at = submitted_at
        self.poll_interval_s = poll_interval_s
        self.start_timeout_s = start_timeout_s
        self.aws_conn_id = aws_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"state": self.state, "report": self.report, "submitted_at": self.submitted_at,
                 "poll_interval_s": self.poll_interval_s, "start_timeout_s": self.start_timeout_s,
                 "aws_conn_id": self.aws_conn_id})

    async def _options(self) -> dict[str, Any]:
        return await sync_to_async(storage_options_for)(self.aws_conn_id, self.state)

    async def _stream(self, options: dict[str, Any] | None = None) -> DetachedStream:
        options = await self._options() if options is None else options
        return DetachedStream(self.state, self.report, submitted_at=self.submitted_at,
                              start_timeout_s=self.start_timeout_s, storage_options=options)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        options = await self._options()
        stream = await self._stream(options)
        metrics = StreamMetrics(PipelineState(self.state, options))  # the stream's figures, as the task sends them
        last_phase = None
        while True:
            lines: list[str] = []
            status = await asyncio.to_thread(stream.status, lines.append)
            await asyncio.to_thread(metrics.observe)
            for line in lines:
                self.log.info("%s", line)
            if status.phase != last_phase:
                self.log.info("stream %s: %s", status.phase.value, status.message)
                last_phase = status.phase
            if status.phase in (StreamPhase.FINISHED, StreamPhase.FAILED, StreamPhase.LOST):
                yield TriggerEvent(encode(status))
                return
            await asyncio.sleep(self.poll_interval_s)

    async def on_kill(self) -> None:
        self.log.info("asking the stream to stop: %s", STOP_REASON)
        await asyncio.to_thread((await self._stream()).request_stop, STOP_REASON)
