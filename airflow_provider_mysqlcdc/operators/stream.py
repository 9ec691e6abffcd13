"""The operator that runs the binlog stream job from the collected seed.

``available-now`` (the default) catches up to the binlog head as of the task's start and finishes,
which suits scheduled runs: each DAG run advances the sink, and the checkpoint makes the next one
continue exactly where this one stopped. ``continuous`` keeps the task (and its worker slot) running
until it is stopped; choose it deliberately, e.g. for a DAG with ``max_active_runs=1`` and no schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook


class MySqlCdcStreamOperator(BaseOperator):
    template_fields: Sequence[str] = ("seed_path", "sink_root", "checkpoint", "mode", "spark_master")

    def __init__(self, *, seed_path: str, sink_root: str, checkpoint: str, mode: str = "available-now",
                 mysqlcdc_conn_id: str = MySqlCdcHook.default_conn_name, spark_master: str = "local[2]",
                 trigger_interval_s: float = 1.0, changelog: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seed_path = seed_path
        self.sink_root = sink_root
        self.checkpoint = checkpoint
        self.mode = mode
        self.mysqlcdc_conn_id = mysqlcdc_conn_id
        self.spark_master = spark_master
        self.trigger_interval_s = trigger_interval_s
        self.changelog = changelog

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_mysqlcdc.spark.stream_job import MODES, StreamJob

        if self.mode not in MODES:
            raise ConfigurationError(f"stream mode must be one of {MODES}, got {self.mode!r}")
        hook = MySqlCdcHook(self.mysqlcdc_conn_id)
        low, high = hook.server_id_range()
        job = StreamJob(seed=self.seed_path, sink_root=self.sink_root, checkpoint=self.checkpoint, mode=self.mode,
                        trigger_interval_s=self.trigger_interval_s, server_id_range=f"{low}-{high}",
                        changelog=self.changelog)
        result = hook.run_spark_job("binlog_stream.py", job.to_json(), spark_master=self.spark_master, log=self.log,
                                    timeout_s=None if self.mode == "continuous" else 6 * 3600)
        self.log.info("stream (%s) applied %d changes; end offset %s", self.mode, result["changes_applied"],
                      result.get("end_offset"))
        return result
