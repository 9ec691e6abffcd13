"""Preflight: is the server, the CDC user and each table ready for lock-free CDC?

Every problem found is reported at once, each naming the setting and the fix, so a user fixes
everything in one round. Nothing here writes to the source.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pymysql
from pymysqlreplication import BinLogStreamReader

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError, PreflightError, PreflightFailures
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema, quote_identifier
from airflow_provider_mysqlcdc.cdc.records.charsets import decodable
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig, pick_server_id
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema
from airflow_provider_mysqlcdc.cdc.source.server import ServerInfo, current_offset, server_info

log = logging.getLogger(__name__)

_ACCESS_DENIED = {1044, 1045, 1142, 1143, 1227, 1370}


@dataclass
class PreflightReport:
    server: ServerInfo
    schemas: dict[TableId, TableSchema]
    chunk_keys: dict[TableId, str]


def _variables(conn: pymysql.connections.Connection, names: Iterable[str]) -> dict[str, str | None]:
    with conn.cursor() as cur:
        cur.execute(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + ", ".join(["%s"] * len(list(names))) + ")",
            tuple(names),
        )
        found = {str(name).lower(): (None if value is None else str(value)) for name, value in cur.fetchall()}
    return {n: found.get(n) for n in names}


#: the server variables ``server_problems`` judges (a server lacks some: None)
SERVER_VARIABLES = ("log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata",
                    "binlog_transaction_compression", "log_bin_compress", "binlog_row_value_options")


def check_server(conn: pymysql.connections.Connection, info: ServerInfo) -> list[str]:
    """Binlog settings the algorithm depends on."""
    return server_problems(_variables(conn, SERVER_VARIABLES), info)


def server_problems(v: Mapping[str, str | None], info: ServerInfo) -> list[str]:
    """What is wrong with the binlog settings ``v`` (``SERVER_VARIABLES``), each with its fix."""
    problems = []
    if (v["log_bin"] or "").upper() not in ("ON", "1"):
        return ["The binary log is off (log_bin=OFF): start the server with log-bin (e.g. log-bin=mysql-bin "
                "in my.cnf) and restart it; CDC reads changes from the binlog."]
    if (v["binlog_format"] or "").upper() != "ROW":
        problems.append(f"binlog_format is {v['binlog_format']}, CDC needs ROW: SET GLOBAL binlog_format='ROW' "
                        "and binlog_format=ROW in my.cnf (statement-based binlogs carry no row images).")
    if (v["binlog_row_image"] or "").upper() != "FULL":
        problems.append(f"binlog_row_image is {v['binlog_row_image']}, CDC needs FULL: SET GLOBAL "
                        "binlog_row_image='FULL' and binlog_row_image=FULL in my.cnf (partial images lose columns).")
    if v["binlog_row_metadata"] is None:
        problems.append(f"The server ({info.version}) has no binlog_row_metadata setting; CDC needs "
                        "binlog_row_metadata=FULL (MySQL 8.0.1+ or MariaDB 10.5+) to decode column names, "
                        "signedness and ENUM/SET labels from the binlog: upgrade the server.")
    elif v["binlog_row_metadata"].upper() != "FULL":
        problems.append(f"binlog_row_metadata is {v['binlog_row_metadata']}, CDC needs FULL: SET GLOBAL "
                        "binlog_row_metadata='FULL' and binlog_row_metadata=FULL in my.cnf (without it column "
                        "names, unsigned and ENUM/SET values decode wrong).")
    if (v["binlog_transaction_compression"] or "OFF").upper() in ("ON", "1"):
        problems.append("binlog_transaction_compression is ON: compressed transactions are invisible to the "
                        "binlog reader; SET GLOBAL binlog_transaction_compression=OFF (and in my.cnf).")
    if (v["log_bin_compress"] or "OFF").upper() in ("ON", "1"):
        problems.append("log_bin_compress is ON: compressed binlog events are invisible to the binlog reader; "
                        "SET GLOBAL log_bin_compress=OFF (and in my.cnf).")
    if "PARTIAL_JSON" in (v["binlog_row_value_options"] or "").upper():
        problems.append("binlog_row_value_options is PARTIAL_JSON: updates of JSON columns are logged as diffs "
                        "against a value the binlog does not carry, so the sink cannot rebuild them; SET GLOBAL "
                        "binlog_row_value_options='' (and binlog_row_value_options='' in my.cnf).")
    return problems


def check_replication_privileges(source: SourceConfig, conn: pymysql.connections.Connection,
                                 info: ServerInfo) -> list[str]:
    """Read the binlog position and open a binlog dump, as the pipeline will."""
    client_privilege = "BINLOG MONITOR" if info.is_mariadb and (info.major, info.minor) >= (10, 5) else "REPLICATION CLIENT"
    try:
        offset = current_offset(conn, info)
    except pymysql.err.OperationalError as exc:
        if exc.args[0] in _ACCESS_DENIED:
            return [f"User {source.user!r} may not read the binlog position: GRANT {client_privilege}, "
                    f"REPLICATION SLAVE ON *.* TO '{source.user}'@'...' ({exc.args[1]})."]
        raise
    stream = BinLogStreamReader(connection_settings=source.replication_settings(), server_id=pick_server_id(),
                                log_file=offset.file, log_pos=offset.position, resume_stream=True, blocking=False)
    try:
        stream.fetchone()
    except pymysql.err.OperationalError as exc:
        if exc.args[0] in _ACCESS_DENIED:
            return [f"User {source.user!r} may not read the binlog: GRANT REPLICATION SLAVE ON *.* TO "
                    f"'{source.user}'@'...' ({exc.args[1]})."]
        raise
    finally:
        stream.close()
    return []


def run_heartbeat_query(conn: pymysql.connections.Connection, statement: str) -> None:
    """The stream's heartbeat statement (stream/heartbeat.py), committed."""
    with conn.cursor() as cur:
        cur.execute(statement)
    conn.commit()


def check_heartbeat_query(source: SourceConfig, conn: pymysql.connections.Connection, statement: str) -> None:
    """Run the heartbeat statement once in a transaction rolled back: one the CDC user may not run, or
    that does not parse, is refused with the reason and the fix."""
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION")
            try:
                cur.execute(statement)
            finally:
                cur.execute("ROLLBACK")
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args else None
        fix = (f"GRANT the CDC user {source.user!r} what it needs on the heartbeat table (e.g. INSERT, UPDATE)"
               if code in _ACCESS_DENIED else "fix the statement")
        raise ConfigurationError(f"heartbeat_query {statement!r} cannot run on the source ({exc.args[-1]}): {fix}; "
                                 "the stream runs it every heartbeat_interval_s while no batch finishes.") from exc


def check_table(conn: pymysql.connections.Connection, table_id: TableId,
                chunk_key_column: str | None) -> tuple[TableSchema | None, str | None, list[str]]:
    try:
        schema = load_table_schema(conn, table_id)
    except PreflightError as exc:
        return None, None, [str(exc)]
    try:
        with conn.cursor() as cur:
            # SELECT * needs the privilege on every column; column grants alone would hide columns.
            cur.execute(f"SELECT * FROM {table_id.quoted} LIMIT 0")
    except pymysql.err.OperationalError as exc:
        if exc.args[0] in _ACCESS_DENIED:
            return schema, None, [f"The CDC user may not read {table_id}: GRANT SELECT ON "
                                  f"{quote_identifier(table_id.database)}.* TO the CDC user ({exc.args[1]})."]
        raise
    reserved = schema.reserved_name_problem() or charset_problem(schema)
    if reserved:
        return schema, None, [reserved]
    try:
        return schema, schema.chunk_key_column(chunk_key_column), []
    except (PreflightError, ConfigurationError) as exc:
        return schema, None, [str(exc)]


def charset_problem(schema: TableSchema) -> str | None:
    """Why the binlog's text of this table cannot be decoded as the server does, if it cannot (a
    character set records/charsets.py does not know: a server newer than this provider)."""
    unknown = [c for c in schema.columns if c.is_text and not decodable(c.charset)]
    if not unknown:
        return None
    return (f"Table {schema.table_id} has column(s) {', '.join(f'{c.name} ({c.charset})' for c in unknown)} in a "
            "character set this version of the provider cannot decode from the binlog: convert them (ALTER TABLE "
            f"{schema.table_id.quoted} MODIFY {quote_identifier(unknown[0].name)} ... CHARACTER SET utf8mb4), or "
            "leave the table out of the pipeline.")


def run_preflight(source: SourceConfig, tables: Iterable[TableId],
                  chunk_key_columns: Mapping[TableId, str] | None = None) -> PreflightReport:
    """Check everything; raise ``PreflightFailures`` listing every problem, else return the schemas."""
    chunk_key_columns = chunk_key_columns or {}
    conn = source.connect()
    try:
        info = server_info(conn)
        problems = check_server(conn, info)
        if not problems:
            problems += check_replication_privileges(source, conn, info)
        schemas: dict[TableId, TableSchema] = {}
        chunk_keys: dict[TableId, str] = {}
        for table_id in tables:
            schema, chunk_key, table_problems = check_table(conn, table_id, chunk_key_columns.get(table_id))
            problems += table_problems
            if schema is not None and chunk_key is not None:
                schemas[table_id] = schema
                chunk_keys[table_id] = chunk_key
    finally:
        conn.close()
    if problems:
        raise PreflightFailures(problems)
    log.info("Preflight passed on %s for %d table(s)", info.version, len(schemas))
    return PreflightReport(info, schemas, chunk_keys)
