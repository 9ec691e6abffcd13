"""The one-call builder: tables in, the whole task graph out.

    with DAG("orders_cdc", schedule=None, max_active_runs=1, params=mysqlcdc_params(sink_root="/lake")):
        mysqlcdc_pipeline(tables=["shop.orders"], sink_root="/lake", state_dir="/state", tables_param=True)

Per table named here, a task group ``<db>__<table>`` holds ``plan`` (preflight + split planning)
and ``snapshot``, one mapped task instance per chunk, named by table and chunk in the UI. Tables
given at trigger time (the DAG param ``tables``, with ``tables_param=True``) cannot get groups of
their own: Airflow refuses to map inside a mapped task group, so they share one group
``param_tables`` whose ``plan`` covers them all and whose ``snapshot`` is mapped over all their
chunks; each chunk is still one retryable task instance, labelled with its table. Then
``collect_splits`` lands the finished splits in the registry at ``<state_dir>/<dag_id>`` and
``stream`` runs the binlog stream from it (checkpoint ``<state_dir>/<dag_id>/checkpoint``).

Every setting a run may change is a DAG param (``mysqlcdc_params``); the builder's arguments are
the defaults when the DAG declares no such param.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Param, TaskGroup

from airflow_provider_mysqlcdc.assets.sink_tables import sink_alias
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.rules import TableRules
from airflow_provider_mysqlcdc.cdc.source.selection import TablePattern, parse_entry
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
from airflow_provider_mysqlcdc.operators.arguments import sink_arguments, sink_spec_of
from airflow_provider_mysqlcdc.operators.collect import MySqlCdcCollectSplitsOperator
from airflow_provider_mysqlcdc.operators.plan import (
    DEFAULT_CHUNK_ROWS,
    DEFAULT_SPLIT_ROWS,
    MySqlCdcPlanOperator,
)
from airflow_provider_mysqlcdc.operators.snapshot import MySqlCdcSnapshotOperator
from airflow_provider_mysqlcdc.operators.stream import STREAM_MODES, MySqlCdcStreamOperator
from airflow_provider_mysqlcdc.protocol.actions import StartupMode
from airflow_provider_mysqlcdc.protocol.jobs import check_snapshot_consistency
from airflow_provider_mysqlcdc.protocol.sinks import DEFAULT_FORMAT, DEFAULT_NAMESPACE


def group_id_for(table: str) -> str:
    """The task group of a table: ``<db>__<table>`` where both are plain (letters, digits, ``_``), else
    that with the other characters as ``_``, cut to 100 characters, and a hash of the exact name, so
    that two tables never share a group (``a.b`` and ``a_b``, ``x y`` and ``x_y``). A pattern
    (cdc/source/selection.py) gets ``pattern__<its text, readable>_<hash>``."""
    entry = parse_entry(table)
    if isinstance(entry, TablePattern):
        readable = re.sub(r"[^A-Za-z0-9_]+", "_", entry.text).strip("_")
        return f"pattern__{readable[:90]}_{hashlib.sha1(entry.text.encode()).hexdigest()[:8]}"
    plain = f"{entry.database}__{entry.table}"
    readable = re.sub(r"[^A-Za-z0-9_]", "_", plain)
    if readable == plain and len(plain) <= 100:
        return plain
    return f"{readable[:100]}_{hashlib.sha1(entry.quoted.encode()).hexdigest()[:8]}"


def mysqlcdc_params(*, sink_root: str, split_rows: int = DEFAULT_SPLIT_ROWS, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                    stream_mode: str = "available-now") -> dict[str, Param]:
    """The DAG params the pipeline reads at trigger time (``DAG(params=mysqlcdc_params(...))``)."""
    return {
        "tables": Param(None, type=["null", "array"], items={"type": "string"},
                        description="Trigger-time tables (db.table, or patterns such as db.order_\\d+). Unset: "
                                    "keep those captured; a list: exactly these (new ones are snapshotted, missing "
                                    "ones stop being captured)."),
        "exclude_tables": Param(None, type=["null", "array"], items={"type": "string"},
                                description="tables (db.table, or patterns) left out of every group's tables"),
        "split_rows": Param(split_rows, type="integer", minimum=1, description="rows per split"),
        "chunk_rows": Param(chunk_rows, type="integer", minimum=1, description="rows per spark-submit chunk"),
        "chunk_key_columns": Param({}, type="object", description="{'db.table': 'column'}: chunk key other than "
                                                                  "the first primary-key column"),
        "sink_root": Param(sink_root, type="string", description="where the sink tables live (set once)"),
        "startup_mode": Param("initial", enum=[m.value for m in StartupMode],
                              description="for tables new to the pipeline: initial (snapshot, then binlog), latest "
                                          "(binlog from now, no snapshot), offset (binlog from start_offset), "
                                          "earliest (the oldest binlog left) or timestamp (binlog from start_time)"),
        "start_offset": Param(None, type=["null", "string"], description="binlog.000042:1234, or a MariaDB GTID "
                                                                         "position such as 0-1-100, for startup_mode "
                                                                         "offset"),
        "start_time": Param(None, type=["null", "string", "number"],
                            description="for startup_mode timestamp: ISO 8601 with a time zone, or epoch seconds"),
        "resnapshot": Param([], type="array", description="re-read while streaming: 'db.table', or "
                                                          "{'table': 'db.table', 'from': low key, 'to': high key}"),
        "stream_mode": Param(stream_mode, enum=list(STREAM_MODES),
                             description="available-now (catch up and finish), continuous (runs until stopped; "
                                         "detached when the stream is deferrable) or skip (a stream runs elsewhere)"),
    }


def _param(name: str, default: Any) -> str:
    return f"{{{{ params.{name} | default({default!r}) }}}}"


def mysqlcdc_pipeline(*, tables: Sequence[str], sink_root: str, state_dir: str,
                      mysqlcdc_conn_id: str = MySqlCdcHook.default_conn_name, split_rows: int = DEFAULT_SPLIT_ROWS,
                      chunk_rows: int = DEFAULT_CHUNK_ROWS, stream_mode: str = "available-now",
                      spark_master: str = "local[2]", spark_conn_id: str | None = None,
                      spark_conf: dict[str, Any] | None = None, changelog: bool = False,
                      on_binlog_purged: str = "fail", tables_param: bool = False,
                      stream_limits: dict[str, Any] | None = None,
                      stream_deferrable: bool | None = None, aws_conn_id: str | None = None,
                      stream_spark_conn_id: str | None = None,
                      exclude_tables: Sequence[str] = (), schema_changes: str = "evolve",
                      columns: dict[str, Any] | None = None,
                      row_filters: dict[str, str] | None = None, heartbeat_interval_s: float | None = None,
                      heartbeat_query: str | None = None, stream_engine: str | None = None,
                      snapshot_consistency: str = "exactly-once",
                      route: dict[str, Any] | None = None, sink_format: str = DEFAULT_FORMAT,
                      iceberg_namespace: str = DEFAULT_NAMESPACE,
                      iceberg_catalog_conn_id: str | None = None, merge_mode: str | None = None,
                      merge_modes: dict[str, str] | None = None) -> dict[str, Any]:
    """Build the graph in the current DAG; ``tables_param`` adds the group for trigger-time tables;
    ``stream_limits`` (``max_batch_bytes``, ``max_batch_events``, ``max_apply_changes``,
    ``cluster_after_files``, ``maintenance_every_s``, ``vacuum_retention_hours``) go to the stream;
    ``stream_deferrable``: a continuous stream runs detached, watched from the triggerer (default:
    Airflow's ``[operators] default_deferrable``).

    Spark: ``spark_conn_id`` names an Airflow ``spark`` connection (master, queue, namespace, Kerberos;
    hooks/spark.py), else ``spark_master`` is used; ``spark_conf`` is added to every job. A
    ``spark_connect`` connection runs the chunk tasks and the stream as Spark Connect sessions
    (launch/connect_runner.py). ``stream_spark_conn_id`` gives the stream a connection of its own
    (default: ``spark_conn_id``), e.g. chunks on a Connect server and the stream on a cluster.

    Object stores: ``sink_root`` and ``state_dir`` may be ``s3://`` (``gs://``, ``abfss://``) URLs;
    ``aws_conn_id`` names the ``aws`` connection whose credentials open them (hooks/object_store.py).

    Table format: ``sink_format`` is ``delta`` (default) or ``iceberg`` (sinks/iceberg/sink.py): an Iceberg
    table per source table, named ``<iceberg_namespace>.<table>`` (``{database}``, the source table's
    database, by default) in the catalog of ``iceberg_catalog_conn_id`` (its extras are pyiceberg's
    catalog properties: hooks/iceberg_catalog.py), or without one in a SQLite catalog at the root of
    a lake on a local path. Choose it before the first run: the tables are captured into it.
    ``merge_mode``: how the stream's batches reach the tables' files, ``merge-on-read`` (the default:
    the rows a batch replaces are marked in deletion vectors, in Iceberg in position-delete files,
    and their new images appended, so a batch costs what it changes) or ``copy-on-write`` (every
    file holding a changed key is rewritten: for readers without deletion vectors); ``merge_modes``
    maps a sink table's name or pattern to its own (``{"shop.audit_log": "copy-on-write"}``, the
    first entry naming a table decides); both may change between runs.

    Tables: ``tables`` and ``exclude_tables`` take names and patterns (``shop.order_\\d+``: regular
    expressions on the database and table names, resolved against the server at each run;
    cdc/source/selection.py). A pattern's group plans every table it matches then. ``schema_changes``:
    what the stream does with a captured table's DDL: ``evolve``, ``lenient``, ``ignore`` or ``fail``
    (operators/stream.py, docs/events-and-types.md).

    Columns: ``columns`` maps a table name or pattern to which of its columns reach the sink and which
    are masked (``include``/``exclude``, ``hash``, ``truncate``, ``null``; cdc/source/rules.py);
    ``row_filters`` maps one to a predicate its rows must satisfy (cdc/records/row_filter.py). Both
    are the DAG file's, not trigger-time params: whoever triggers a run cannot unmask a column.
    ``route`` maps one to a sink table that every table it matches writes into (sharded tables into
    one: ``{"shop_\\d+.orders": "shop.orders"}``; sinks/routing.py), a DAG-file setting too.

    Heartbeats: ``heartbeat_interval_s`` (default 30) and ``heartbeat_query`` go to the stream
    (operators/stream.py, stream/heartbeat.py), and so does ``stream_engine`` (who runs its batches:
    ``driver``, the default, stream/loop.py, or ``structured-streaming``, the default on Spark Connect).

    ``snapshot_consistency="at-least-once"`` reads the chunks without their binlog windows: faster
    under concurrent writes; the mirror converges all the same, its changelog may hold a change the
    snapshot already had (operators/snapshot.py, docs/cdc-semantics.md)."""
    for entry in [*tables, *exclude_tables]:  # a malformed entry fails the DAG when it is parsed
        parse_entry(entry)
    # and so does a malformed rule, filter or route, and a route across the groups of tables
    TableRules.parse(columns, row_filters, route).check_route_groups([parse_entry(t) for t in tables])
    check_snapshot_consistency(snapshot_consistency)  # and an unknown consistency (mapped tasks check late)
    # the sink: one spec, checked when the DAG is parsed, recorded by the pipeline's first run (state/sink.py)
    sink_spec = sink_spec_of(_param("sink_root", sink_root), sink_format, iceberg_namespace, iceberg_catalog_conn_id,
                             merge_mode, merge_modes)
    # what the chunk tasks and the stream share: where Spark runs, and the sink they write
    spark: dict[str, Any] = dict(spark_master=spark_master, spark_conn_id=spark_conn_id, spark_conf=spark_conf,
                                 aws_conn_id=aws_conn_id, **sink_arguments(sink_spec))
    state = f"{state_dir.rstrip('/')}/{{{{ dag.dag_id }}}}"
    common: dict[str, Any] = dict(
        state_location=state, mysqlcdc_conn_id=mysqlcdc_conn_id, split_rows=_param("split_rows", split_rows),
        chunk_rows=_param("chunk_rows", chunk_rows), chunk_key_columns=_param("chunk_key_columns", {}),
        startup_mode=_param("startup_mode", "initial"), start_offset=_param("start_offset", None),
        start_time=_param("start_time", None),
        resnapshot=_param("resnapshot", None), aws_conn_id=aws_conn_id, columns=columns, row_filters=row_filters, route=route,
        exclude_tables=_param("exclude_tables", list(exclude_tables) or None))
    groups: list[tuple[str, Any, list[str]]] = [(group_id_for(t), [t], _precedence(list(tables), i))
                                                for i, t in enumerate(tables)]
    if tables_param:
        groups.append(("param_tables", _param("tables", None), list(tables)))
    plan_ids, snapshots, collected = [], [], []
    for group_id, group_tables, leave_to in groups:
        with TaskGroup(group_id=group_id):
            plan = MySqlCdcPlanOperator(task_id="plan", tables=group_tables, **common,
                                        unset_covers_captured_except=list(tables) if group_id == "param_tables" else None,
                                        leave_to_other_groups=leave_to,
                                        run_tables={"dag": list(tables),
                                                    **({"param": _param("tables", None)} if tables_param else {})})
            snapshot = MySqlCdcSnapshotOperator.partial(
                task_id="snapshot", state_location=state, mysqlcdc_conn_id=mysqlcdc_conn_id, **spark,
                outlets=[sink_alias(sink_root)], snapshot_consistency=snapshot_consistency,
                map_index_template="{{ task.chunk['label'] }}",
            ).expand(chunk=plan.output)
        plan_ids.append(plan.task_id)
        snapshots.append(snapshot)
        collected.append((plan.task_id, snapshot.task_id))
    # all_done: a group with nothing to read maps to zero chunks (which Airflow marks skipped), and one
    # table's failed chunk task must not hold back the others (collect.py leaves that table out)
    collect = MySqlCdcCollectSplitsOperator(task_id="collect_splits", groups=collected, state_location=state,
                                            aws_conn_id=aws_conn_id, trigger_rule="all_done")
    snapshots >> collect
    stream_options: dict[str, Any] = {**(stream_limits or {}), **spark,
                                      "spark_conn_id": stream_spark_conn_id or spark_conn_id,
                                      "heartbeat_interval_s": heartbeat_interval_s, "heartbeat_query": heartbeat_query,
                                      "stream_engine": stream_engine}
    if stream_deferrable is not None:
        stream_options["deferrable"] = stream_deferrable
    stream = MySqlCdcStreamOperator(task_id="stream", state_location=state,
                                    mode=_param("stream_mode", stream_mode), mysqlcdc_conn_id=mysqlcdc_conn_id,
                                    changelog=changelog, on_binlog_purged=on_binlog_purged,
                                    outlets=[sink_alias(sink_root)],
                                    table_patterns=f"{{{{ ((params.tables | default(None)) or []) + {list(tables)!r} }}}}",
                                    exclude_tables=_param("exclude_tables", list(exclude_tables) or None),
                                    schema_changes=schema_changes,
                                    **stream_options)
    collect >> stream
    _require_one_run_at_a_time(collect)
    return {"plan_task_ids": plan_ids, "snapshots": snapshots, "collect": collect, "stream": stream}


def _precedence(tables: list[str], index: int) -> list[str]:
    """What the group of ``tables[index]`` leaves to the others: a name is its own group's; a pattern
    leaves every name, and the tables earlier patterns match, to their groups."""
    if not isinstance(parse_entry(tables[index]), TablePattern):
        return []
    return [t for i, t in enumerate(tables)
            if i != index and (i < index or not isinstance(parse_entry(t), TablePattern))]


def _require_one_run_at_a_time(task: Any) -> None:
    """Two runs of one pipeline would plan, snapshot and land generations against the same registry
    at once; refuse the DAG when it is parsed rather than let the second collect fail later."""
    dag = task.dag if task.has_dag() else None
    if dag is not None and dag.max_active_runs != 1:
        raise ConfigurationError(f"DAG {dag.dag_id!r} allows {dag.max_active_runs} active runs, but runs of one CDC "
                                 "pipeline share its registry and must not overlap: pass max_active_runs=1 to DAG(...).")
