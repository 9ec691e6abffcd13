"""``MySqlCdcStreamOperator``: runs the binlog stream job over the pipeline's registry.

``available-now`` (the default) catches up to the binlog head as of the task's start and finishes,
which suits scheduled runs: each DAG run advances the sink, and the checkpoint makes the next one
continue exactly where this one stopped. ``continuous`` keeps the task (and its worker slot)
running until it is stopped; choose it deliberately, e.g. in a DAG of its own with
``max_active_runs=1``. ``skip`` runs nothing: a continuous stream elsewhere picks up what this run
registered at its next micro-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.records import ON_BINLOG_PURGED
from airflow_provider_mysqlcdc.hooks.spark import checked_spark_conf
from airflow_provider_mysqlcdc.operators.spark_job import MySqlCdcSparkJobOperator
from airflow_provider_mysqlcdc.protocol.actions import StreamMode
from airflow_provider_mysqlcdc.protocol.envelope import decode, encode
from airflow_provider_mysqlcdc.protocol.jobs import StreamJob
from airflow_provider_mysqlcdc.protocol.results import StreamResult
from airflow_provider_mysqlcdc.state.registry import PipelineState

STREAM_MODES = (*(m.value for m in StreamMode), "skip")


class MySqlCdcStreamOperator(MySqlCdcSparkJobOperator):
    """The binlog stream into the sink (see the module doc for the modes).

    :param state: the pipeline's state location (``<state_dir>/<dag_id>``)
    :param sink_root: where the Delta tables live
    :param mode: ``available-now``, ``continuous`` or ``skip``
    :param mysqlcdc_conn_id: the ``mysqlcdc`` connection of the source
    :param spark_master: Spark master when no ``spark_conn_id`` is given
    :param spark_conn_id: an Airflow ``spark`` connection to submit through (hooks/spark.py)
    :param spark_conf: extra Spark configuration (no secrets)
    :param trigger_interval_s: micro-batch interval in ``continuous`` mode
    :param changelog: also append every change to ``<table>__changelog``
    :param on_binlog_purged: binlog the stream needs was purged: ``fail`` (the default, with the way
        out) or ``resnapshot`` (record exactly the tables that needed it; the next DAG run
        re-snapshots them, as Debezium's ``when_needed`` does)
    :param max_batch_bytes: a micro-batch ends at the first transaction end after this much binlog
        (default 128 MiB; 0: no limit); a larger transaction makes a batch of its own
    :param max_batch_events: the same in binlog events (default: no limit)
    :param max_apply_changes: changes merged per commit (default 100,000): a larger batch, one huge
        transaction too, is merged in pieces, each recording its binlog position (so memory stays
        bounded and a restart resumes exactly; readers may see such a transaction in pieces)
    """

    template_fields: Sequence[str] = ("state", "sink_root", "mode", "spark_master", "spark_conn_id", "spark_conf")

    def __init__(self, *, state: str, sink_root: str, mode: str = "available-now", trigger_interval_s: float = 1.0,
                 changelog: bool = False, on_binlog_purged: str = "fail", max_batch_bytes: int | None = None,
                 max_batch_events: int | None = None, max_apply_changes: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if on_binlog_purged not in ON_BINLOG_PURGED:
            raise ConfigurationError(f"on_binlog_purged must be one of {', '.join(ON_BINLOG_PURGED)}, got "
                                     f"{on_binlog_purged!r}.")
        self.on_binlog_purged = on_binlog_purged
        self.state = state
        self.sink_root = sink_root
        self.mode = mode
        if isinstance(self.spark_conf, dict):  # refused at parse time when it is not a template
            checked_spark_conf(self.spark_conf)
        self.trigger_interval_s = trigger_interval_s
        self.changelog = changelog
        # None: the stream job's default (protocol/jobs.py), defined there once
        self.limits = {name: value for name, value in (("max_batch_bytes", max_batch_bytes),
                                                       ("max_batch_events", max_batch_events),
                                                       ("max_apply_changes", max_apply_changes)) if value is not None}

    def execute(self, context: Context) -> dict[str, Any]:
        if self.mode not in STREAM_MODES:
            raise ConfigurationError(f"stream mode must be one of {', '.join(STREAM_MODES)}, got {self.mode!r}")
        if self.mode == "skip":
            self.log.info("stream mode 'skip': a stream running elsewhere picks up this run's registry changes")
            return encode(StreamResult("skip"))
        hook = self.hook
        low, high = hook.server_id_range()
        job = StreamJob(state=self.state, sink_root=self.sink_root, mode=self.mode,
                        trigger_interval_s=self.trigger_interval_s, server_id_range=f"{low}-{high}",
                        changelog=self.changelog, retry_budget_s=hook.retry_budget_s(),
                        on_binlog_purged=self.on_binlog_purged, **self.limits)
        output = self.run_spark_program("binlog_stream.py", job.to_json(), PipelineState(self.state), context)
        result = decode(StreamResult, output, "the stream job's result")
        self.log.info("stream (%s) applied %d changes; end offset %s", self.mode, result.changes_applied,
                      result.end_offset or "-")
        return encode(result)
