"""The two baselines a stream benchmark sets beside the stream: what ``mariadb-binlog -v`` and
python-mysql-replication alone take to decode the same binlog range."""

from __future__ import annotations

import os
import subprocess
import time

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.devtools.throwaway_server import ThrowawayMariaDB


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
