"""Operators of the snapshot phase: plan the chunks of a table, snapshot one chunk, collect the splits.

- ``MySqlCdcPlanOperator``: preflight (every problem at once, before any Spark job), then the
  table's splits, grouped into chunks (one spark-submit each); returns the chunks for mapping.
- ``MySqlCdcSnapshotOperator``: the operator DAG authors see in the UI once per chunk (mapped): one
  spark-submit of ``spark_jobs/snapshot_chunk.py`` for a few consecutive splits; returns the finished
  splits (with their high watermarks) through XCom. Clearing one of its task instances re-reads
  exactly that chunk, which replaces its key ranges in the sink.
- ``MySqlCdcCollectSplitsOperator``: checks that every planned split finished and writes the stream
  seed (all finished splits) to the durable state location.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit
from airflow_provider_mysqlcdc.cdc.planning.splitter import ChunkSplitter, SplitOptions
from airflow_provider_mysqlcdc.cdc.source.preflight import run_preflight
from airflow_provider_mysqlcdc.cdc.source.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook

#: Rows per split (one atomic replace in the sink) and per chunk (one spark-submit). A spark-submit
#: costs 15-20 s before any work here and a chunk reads ~190k rows/s, so 2M rows per chunk keeps
#: the fixed cost under half of the chunk's time while leaving chunks small enough to retry.
DEFAULT_SPLIT_ROWS = 250_000
DEFAULT_CHUNK_ROWS = 2_000_000


def parse_tables(tables: str | Sequence[str], *, allow_empty: bool = False) -> list[TableId]:
    """Tables as a list, a comma-separated string, or the rendered text of a list (a templated param)."""
    if isinstance(tables, str) and tables.strip().startswith("["):
        import ast

        try:
            tables = ast.literal_eval(tables.strip())
        except (ValueError, SyntaxError) as exc:
            raise ConfigurationError(f"Malformed table list {tables!r}: write ['db.table', ...].") from exc
    items = [t for t in (tables.split(",") if isinstance(tables, str) else tables or []) if str(t).strip()]
    if not items and not allow_empty:
        raise ConfigurationError("No tables to capture: give tables as ['db.table', ...].")
    return [TableId.parse(str(t)) for t in items]


class MySqlCdcPlanOperator(BaseOperator):
    template_fields: Sequence[str] = ("tables", "chunk_key_columns", "split_rows", "chunk_rows")

    def __init__(self, *, tables: str | Sequence[str], mysqlcdc_conn_id: str = MySqlCdcHook.default_conn_name,
                 split_rows: int = DEFAULT_SPLIT_ROWS, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 chunk_key_columns: dict[str, str] | None = None, allow_no_tables: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tables = tables
        self.allow_no_tables = allow_no_tables
        self.mysqlcdc_conn_id = mysqlcdc_conn_id
        self.split_rows = split_rows
        self.chunk_rows = chunk_rows
        self.chunk_key_columns = chunk_key_columns or {}

    def execute(self, context: Context) -> list[dict[str, Any]]:
        table_ids = parse_tables(self.tables, allow_empty=self.allow_no_tables)
        if not table_ids:
            self.log.info("no tables given in the DAG params: nothing to plan")
            return []
        source = MySqlCdcHook(self.mysqlcdc_conn_id).source_config()
        split_rows, chunk_rows = int(self.split_rows), int(self.chunk_rows)
        if split_rows < 1 or chunk_rows < split_rows:
            raise ConfigurationError(f"Need 1 <= split_rows <= chunk_rows, got {split_rows} and {chunk_rows}.")
        chunk_keys = {TableId.parse(t): c for t, c in (self.chunk_key_columns or {}).items()}
        report = run_preflight(source, table_ids, chunk_keys)
        conn = source.connect()
        try:
            low = current_offset(conn, report.server)
            chunks = []
            for table_id in table_ids:
                options = SplitOptions(chunk_size=split_rows, chunk_key_column=report.chunk_keys[table_id])
                splits = ChunkSplitter(conn, report.schemas[table_id], options).split()
                per_chunk = max(1, chunk_rows // split_rows)
                groups = [splits[i:i + per_chunk] for i in range(0, len(splits), per_chunk)]
                for number, group in enumerate(groups, start=1):
                    chunks.append({"label": f"{table_id} chunk {number}/{len(groups)}", "table": str(table_id),
                                   "splits": [s.to_dict() for s in group]})
                self.log.info("%s: %d splits in %d chunk(s)", table_id, len(splits), len(groups))
        finally:
            conn.close()
        self.log.info("planned %d chunk(s) for %d table(s); binlog position at planning: %s",
                      len(chunks), len(table_ids), low)
        return chunks


class MySqlCdcSnapshotOperator(BaseOperator):
    template_fields: Sequence[str] = ("chunk", "sink_root", "spark_master")

    def __init__(self, *, chunk: dict[str, Any], sink_root: str, mysqlcdc_conn_id: str = MySqlCdcHook.default_conn_name,
                 spark_master: str = "local[2]", partitions_per_split: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.chunk = chunk
        self.sink_root = sink_root
        self.mysqlcdc_conn_id = mysqlcdc_conn_id
        self.spark_master = spark_master
        self.partitions_per_split = partitions_per_split

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_mysqlcdc.spark.chunk_job import ChunkJob

        hook = MySqlCdcHook(self.mysqlcdc_conn_id)
        chunk = self.chunk if isinstance(self.chunk, dict) else json.loads(self.chunk)
        job = ChunkJob(table=chunk["table"], splits=chunk["splits"], sink_root=self.sink_root,
                       partitions_per_split=self.partitions_per_split, server_id_range=hook.server_id_range())
        self.log.info("snapshot %s: %d split(s) with spark-submit", chunk["label"], len(chunk["splits"]))
        result = hook.run_spark_job("snapshot_chunk.py", job.to_json(), spark_master=self.spark_master, log=self.log)
        self.log.info("snapshot %s done: %d rows, %d binlog changes merged, %.1fs", chunk["label"], result["rows"],
                      result["binlog_events_merged"], result["seconds"])
        return {"label": chunk["label"], **result}


class MySqlCdcCollectSplitsOperator(BaseOperator):
    template_fields: Sequence[str] = ("plans", "results", "state_path")

    def __init__(self, *, plans: Any, results: Any, state_path: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plans = plans
        self.results = results
        self.state_path = state_path

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_mysqlcdc.spark.binlog_source import StreamSeed

        planned = {(c["table"], s["index"]) for c in _items(self.plans) for s in c["splits"]}
        finished: dict[tuple[str, int], FinishedSplit] = {}
        for result in _items(self.results):
            for data in result["finished_splits"]:
                split = FinishedSplit.from_dict(data)
                finished[(str(split.split.table_id), split.split.index)] = split
        missing = sorted(planned - set(finished))
        if missing:
            raise ConfigurationError(f"{len(missing)} planned split(s) did not finish, e.g. {missing[:5]}: re-run "
                                     "their chunk tasks before streaming.")
        seed = StreamSeed(list(finished.values()))
        seed.save(self.state_path)
        tables = sorted({t for t, _ in finished})
        self.log.info("collected %d finished splits of %d table(s) into %s", len(finished), len(tables), self.state_path)
        return {"seed": self.state_path, "tables": tables, "splits": len(finished),
                "start_offset": seed.initial_offset().to_dict()}


def _items(groups: Any) -> list[dict[str, Any]]:
    """One list out of per-group XCom values (each a list, or the lazy sequence of a mapped task)."""
    out: list[dict[str, Any]] = []
    for group in groups or []:
        out.extend([group] if isinstance(group, dict) else list(group))
    return out
