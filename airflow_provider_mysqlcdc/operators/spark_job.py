"""What the chunk and stream operators share: their Spark program, where it runs, its UI link, and
stopping it when the task is killed (marked failed, cleared, or past its ``execution_timeout``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.hooks.object_store import open_object_store
from airflow_provider_mysqlcdc.hooks.spark import MySqlCdcSparkHook
from airflow_provider_mysqlcdc.launch.connect_runner import SparkConnectJobRunner
from airflow_provider_mysqlcdc.launch.submit import SparkJobRunner, started_again
from airflow_provider_mysqlcdc.links.spark import SPARK_UI_XCOM_KEY, SparkUiLink
from airflow_provider_mysqlcdc.operators.arguments import sink_spec_of
from airflow_provider_mysqlcdc.protocol.results import DriverInfo
from airflow_provider_mysqlcdc.protocol.sinks import DEFAULT_FORMAT, DEFAULT_NAMESPACE, SinkSpec
from airflow_provider_mysqlcdc.sinks.factory import open_sink
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.sink import settle_sink


class MySqlCdcSparkJobOperator(BaseOperator):
    """Base of the operators that run a program of ``spark/jobs/`` (not used in DAGs by itself).

    :param mysqlcdc_conn_id: the ``mysqlcdc`` connection of the source
    :param spark_master: Spark master when no ``spark_conn_id`` is given
    :param spark_conn_id: an Airflow ``spark`` connection to submit through (hooks/spark.py), or a
        ``spark_connect`` one whose server runs the program as a session (launch/connect_runner.py)
    :param spark_conf: extra Spark configuration (no secrets)
    :param aws_conn_id: an ``aws`` connection whose credentials open the lake and the state location on
        an object store (hooks/object_store.py); none: the machine's own credentials
    :param sink_root: where the sink tables live (Delta tables, an Iceberg table's data unless its catalog
        places it)
    :param sink_format: the sink tables' format, ``delta`` (default) or ``iceberg``
    :param iceberg_namespace: an Iceberg sink's namespace of each table, ``{database}`` (the source
        table's) by default
    :param iceberg_catalog_conn_id: a connection whose extras are the Iceberg catalog's properties
        (hooks/iceberg_catalog.py); none: the embedded SQLite catalog of a lake on a local path
    :param merge_mode: how the stream's batches reach the sink's files: ``merge-on-read`` (the
        default: Delta deletion vectors, Iceberg position deletes; a batch costs what it changes) or
        ``copy-on-write`` (every file holding a changed key rewritten); none: the format's default
    :param merge_modes: the tables merged otherwise than ``merge_mode``: a mapping of a sink table's
        name or pattern (``db.table``, ``shop.log_\\d+``) to its merge mode, the first entry naming
        a table deciding

    The sink settings make the pipeline's ``SinkSpec`` (protocol/sinks.py), recorded in its state
    location by its first run (state/sink.py): a task naming another sink is refused before it writes
    (the merge mode alone may change between runs).
    """

    operator_extra_links = (SparkUiLink(),)
    spark_ui_url = ""  # the running program's Spark UI (links/spark.py)

    def __init__(self, *, sink_root: str, mysqlcdc_conn_id: str = MySqlCdcHook.default_conn_name,
                 spark_master: str = "local[2]", spark_conn_id: str | None = None,
                 spark_conf: dict[str, Any] | None = None, aws_conn_id: str | None = None,
                 sink_format: str = DEFAULT_FORMAT, iceberg_namespace: str = DEFAULT_NAMESPACE,
                 iceberg_catalog_conn_id: str | None = None, merge_mode: str | None = None,
                 merge_modes: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mysqlcdc_conn_id = mysqlcdc_conn_id
        self.aws_conn_id = aws_conn_id
        self.sink_root = sink_root
        self.sink_format = sink_format
        self.iceberg_namespace = iceberg_namespace
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.merge_mode = merge_mode
        self.merge_modes = merge_modes
        self.sink_spec()  # a malformed sink is refused when the DAG is parsed
        self.spark_master = spark_master
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf

    def sink_spec(self) -> SinkSpec:
        """The sink this task's (rendered) arguments name."""
        return sink_spec_of(self.sink_root, self.sink_format, self.iceberg_namespace, self.iceberg_catalog_conn_id,
                            self.merge_mode, self.merge_modes)

    def pipeline_sink(self, state: PipelineState) -> SinkSpec:
        """The pipeline's sink: this task's, recorded at the pipeline's first run; refused when it differs
        from the recorded one (state/sink.py)."""
        return settle_sink(state, self.sink_spec())

    @cached_property
    def hook(self) -> MySqlCdcHook:
        return MySqlCdcHook(self.mysqlcdc_conn_id)

    @cached_property
    def object_store(self) -> ObjectStoreCredentials:
        """The lake's and the state location's credentials, installed in this process once asked for."""
        return open_object_store(self.aws_conn_id, self.iceberg_catalog_conn_id)

    @cached_property
    def spark_hook(self) -> MySqlCdcSparkHook:
        return MySqlCdcSparkHook(self.spark_conn_id, spark_master=self.spark_master, spark_conf=self.spark_conf)

    @cached_property
    def spark_runner(self) -> SparkJobRunner | SparkConnectJobRunner:
        """What starts this task's program (hooks/spark.py ``MySqlCdcSparkHook.runner``); the shared local
        server outlives this task, so it must not keep this task's object-store credentials."""
        return self.spark_hook.runner(name=f"mysqlcdc {self.dag_id}.{self.task_id}", log=self.log,
                                      private=tuple(self.object_store.variables))

    def report_folder(self, state: PipelineState, context: Context) -> str:
        """Where this try's Spark program reports (spark/report.py), in the run's folder of ``state``."""
        ti = context["ti"]
        return state.job_report_url(context["run_id"], f"{self.task_id}-{ti.map_index}-{ti.try_number}")

    def run_spark_program(self, script: str, job_json: str, state: PipelineState, context: Context) -> dict[str, Any]:
        """Run ``script`` with ``job_json`` to its end; its result. Started again when Spark's Python
        workers fail to start (launch/submit.py ``started_again``)."""
        return started_again(lambda: self.spark_runner.run(
            script, job_json, source=self.hook.source_config(), object_store=self.object_store,
            report_folder=self.report_folder(state, context), on_driver=self._driver_started(context)),
            f"Spark program {script}", log=self.log)

    def start_spark_program(self, script: str, job_json: str, state: PipelineState, context: Context) -> None:
        """Start ``script`` detached (SparkJobRunner.start): returns once its driver is up (started again
        when Spark's Python workers fail to start before)."""
        started_again(lambda: self.spark_runner.start(
            script, job_json, source=self.hook.source_config(), object_store=self.object_store,
            report_folder=self.report_folder(state, context), on_driver=self._driver_started(context)),
            f"Spark program {script}", log=self.log)

    def _driver_started(self, context: Context) -> Callable[[DriverInfo], None]:
        def driver_started(info: DriverInfo) -> None:
            if info.ui_url:
                self.spark_ui_url = info.ui_url
                context["ti"].xcom_push(key=SPARK_UI_XCOM_KEY, value=info.ui_url)

        return driver_started

    def source_lineage(self, state: PipelineState, tables: Mapping[TableId, str | None],
                       rows: Mapping[TableId, int] | None) -> Any:
        """The OpenLineage of a task reading ``tables`` (with their chunk keys) from the source into
        its sink, ``rows`` per table once it ended (lineage/openlineage.py)."""
        from airflow_provider_mysqlcdc.lineage.openlineage import known_tables, pipeline_lineage

        self.object_store  # noqa: B018 - the state location may be on an object store
        source = self.hook.source_config()
        sink = self.sink_spec()
        return pipeline_lineage(host=source.host, port=source.port, sink=sink,
                                tables=known_tables(state, tables, rows), locate=self._placed_location(sink))

    def _placed_location(self, spec: SinkSpec) -> Callable[[TableId], str | None] | None:
        """Where a catalog placed a table, for a catalog that places its tables; a catalog that cannot
        answer now leaves the table named by the sink's root (lineage never fails a task)."""
        if not spec.catalog_conn_id:
            return None
        sink = open_sink(spec)

        def placed(table_id: TableId) -> str | None:
            try:
                return sink.placed_location(table_id)
            except Exception as exc:
                self.log.warning("lineage names %s by the lake's root: its catalog did not answer (%s)", table_id, exc)
                return None

        return placed

    def on_kill(self) -> None:
        if "spark_runner" in self.__dict__:  # a Spark program was started (or is starting)
            self.spark_runner.on_kill()
