"""What a stream benchmark sets beside the stream: what ``mariadb-binlog -v`` and python-mysql-replication
alone take to decode the same binlog range, and what the stream's own reader takes with each row
decoder (the raw decoding, before Spark)."""

from __future__ import annotations

import os
import subprocess
import time

from airflow_provider_mysqlcdc.cdc.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord
from airflow_provider_mysqlcdc.cdc.source.schema import TableId, load_table_schema
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


#: the row decoders a benchmark times the reader with (cdc/binlog/row_decoder.py)
READER_DECODERS = ("compiled", "python")


def reader_seconds(server: ThrowawayMariaDB, tables: list[TableId], start: BinlogOffset, end: BinlogOffset,
                   changes: int) -> dict[str, float]:
    """Our binlog reader over the range, to change records, with each of ``READER_DECODERS``: the
    stream's decoding without Spark (which reads a large range in two pieces in parallel)."""
    conn = server.connect_root()
    schemas = [load_table_schema(conn, t) for t in tables]
    conn.close()
    seconds = {}
    for decoder in READER_DECODERS:
        started = time.monotonic()
        reader = BinlogReader.for_schemas(server.root_config(), schemas, start=start, end=end, decoder=decoder)
        decoded = sum(1 for item in reader if isinstance(item, ChangeRecord))
        seconds[decoder] = time.monotonic() - started
        assert decoded == changes, (decoder, decoded, changes)
        assert set(reader.events_decoded) == {decoder}, reader.events_decoded
    return seconds


def reader_rows(changes: int, seconds: dict[str, float]) -> list[str]:
    """The report's table rows for ``reader_seconds``."""
    return [f"| our binlog reader, {decoder} row decoder, raw decoding (no Spark) | {seconds[decoder]:.1f} | "
            f"{changes / seconds[decoder]:,.0f} |" for decoder in READER_DECODERS]
