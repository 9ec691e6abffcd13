"""What a stream benchmark sets beside the stream: what ``mariadb-binlog -v`` and python-mysql-replication
alone take to decode the same binlog range, and what the stream's own reader takes with each row
decoder (the raw decoding, before Spark)."""

from __future__ import annotations

import cProfile
import os
import pstats
import subprocess
import time
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from devtools.throwaway_server import ThrowawayMariaDB


def mariadb_binlog_seconds(server: ThrowawayMariaDB, start: BinlogOffset, end: BinlogOffset) -> float:
    """``mariadb-binlog -v`` over the range ``start``-``end`` of one binlog file, its output dropped."""
    assert start.file == end.file, "the range crosses a binlog rotation; use a larger max_binlog_size"
    cmd = ["mariadb-binlog", "-v", f"--start-position={start.position}", f"--stop-position={end.position}",
           str(server.base_dir / "data" / end.file)]
    started = time.monotonic()
    with open(os.devnull, "wb") as devnull:
        subprocess.run(cmd, stdout=devnull, check=True)
    return time.monotonic() - started


def python_replication_seconds(server: ThrowawayMariaDB, start: BinlogOffset, end: BinlogOffset, changes: int) -> float:
    """python-mysql-replication decoding every row of the range's row events (which must be ``changes``)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    started = time.monotonic()
    stream = BinLogStreamReader(connection_settings=server.root_config().replication_settings(), server_id=4242,
                                log_file=start.file, log_pos=start.position, resume_stream=True, blocking=False,
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], end_log_pos=end.position)
    decoded = sum(len(event.rows) for event in stream)
    stream.close()
    assert decoded == changes, (decoded, changes)
    return time.monotonic() - started


#: the reader's runs a benchmark times (cdc/binlog/row_decoder.py, cdc/binlog/framing.py): each row
#: decoder on our own framing, and the compiled one on python-mysql-replication's, the baseline ours replaced
READER_RUNS = {"compiled": ("compiled", "auto"), "python": ("python", "auto"),
               "compiled, library framing": ("compiled", "library")}


def reader_seconds(server: ThrowawayMariaDB, tables: list[TableId], start: BinlogOffset, end: BinlogOffset,
                   changes: int) -> dict[str, float]:
    """Our binlog reader over the range, to change records, in each of ``READER_RUNS``: the stream's
    decoding without Spark (which reads a large range in two pieces in parallel)."""
    conn = server.connect_root()
    schemas = [load_table_schema(conn, t) for t in tables]
    conn.close()
    seconds = {}
    for run, (decoder, framing) in READER_RUNS.items():
        started = time.monotonic()
        reader = BinlogReader.for_schemas(server.root_config(), schemas, start=start, end=end, decoder=decoder,
                                          framing=framing)
        decoded = sum(1 for item in reader if isinstance(item, ChangeRecord))
        seconds[run] = time.monotonic() - started
        assert decoded == changes, (run, decoded, changes)
        assert set(reader.events_decoded) == {decoder}, reader.events_decoded
        assert set(reader.events_framed) == {"ours" if framing == "auto" else "library"}, reader.events_framed
    return seconds


def reader_rows(changes: int, seconds: dict[str, float]) -> list[str]:
    """The report's table rows for ``reader_seconds``."""
    def framed(run: str) -> str:
        return "python-mysql-replication's framing" if READER_RUNS[run][1] == "library" else "our framing"

    return [f"| our binlog reader, {READER_RUNS[run][0]} row decoder, {framed(run)}, raw decoding (no Spark) | "
            f"{seconds[run]:.1f} | {changes / seconds[run]:,.0f} |" for run in READER_RUNS if run in seconds]


#: the stages a profile of the stream's read splits its time into, by the module a function is in
#: (the first that matches): framing and events in python-mysql-replication and our reader around it,
#: the row decoder, the change records and split filter, the Arrow columns and IPC of a batch's rows
#: (framing: ours or the library's, whichever read)
STAGES = (("arrow", ("pyarrow", "change_columns", "batch_rows", "arrow_rows", "spill", "stream/reading")),
          ("decoding", ("row_decoder", "mysqlcdc_rowcodec", "table_decoding", "values", "charsets")),
          ("records", ("records", "split_filter", "offset")),
          ("framing", ("pymysqlreplication", "pymysql", "reader", "library_fixes", "xa", "gtid", "socket", "ssl",
                       "dump", "framing", "events")))


def source_read_profile(job_json: str, source: SourceConfig, start: BinlogOffset, end: BinlogOffset,
                        generation: int, spill_folder: str) -> dict[str, Any]:
    """The binlog source's ``read`` of one partition over the whole range, run in this process, no
    Spark: what an executor does for a micro-batch, minus Spark. Its seconds unprofiled, and a
    profiled run's self time split into ``STAGES`` (plus ``other``), as shares."""
    from airflow_provider_mysqlcdc.spark.binlog_source import BinlogPartition, BinlogStreamReader
    from airflow_provider_mysqlcdc.stream.batches import RangeRead

    reader = BinlogStreamReader({"job": job_json, "source": source.to_json()})

    def read() -> int:
        partition = BinlogPartition(RangeRead(start, None, end, 4243, generation, {}), spill_folder)
        return sum(1 for _ in reader.read(partition))

    started = time.monotonic()
    rows = read()
    seconds = time.monotonic() - started
    profile = cProfile.Profile()
    profile.runcall(read)
    stats = pstats.Stats(profile)
    shares: dict[str, float] = {}
    for (path, _, function), (_, _, self_s, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{path}:{function}"
        stage = next((name for name, marks in STAGES if any(m in where for m in marks)), "other")
        shares[stage] = shares.get(stage, 0.0) + self_s
    total = sum(shares.values()) or 1.0
    top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:15]  # type: ignore[attr-defined]
    return {"seconds": seconds, "rows": rows, "shares": {k: v / total for k, v in shares.items()},
            "top": [f"{Path(path).name}:{line} {function} {self_s:.2f}s" for (path, line, function), (_, _, self_s, _, _)
                    in top]}
