"""The last schema the pipeline saw of each captured table.

A table can leave the server while the pipeline still has work for it: the stream may replay a
batch that changed the table before a ``DROP TABLE`` or ``RENAME TABLE``, and its Spark tasks place
keys into splits by the table's key columns. The server cannot describe such a table any more, so
every process that reads a schema from the server and may need it later remembers it here (the
plan for every table it plans, the stream for every table it writes), and a table that is gone is
described by its last remembered schema.

The same memory keeps a stream from being wedged by a key or type change it has not reached yet: a
batch replayed from before ``ALTER TABLE ... RENAME COLUMN id TO id2`` (or a DROP/CHANGE of a key
column, or ``MODIFY d DECIMAL(10,4)``) holds changes keyed by ``id``, or typed as before, while the
server already says otherwise. ``for_stream`` describes such a table by the remembered schema until
the stream reaches the statement (which freezes the table until it is re-snapshotted), and a plan
that runs in between keeps that schema (``remember_planned``) rather than the server's.
"""

from __future__ import annotations

from urllib.parse import quote

import pymysql

from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.planning.splitter import INTEGER_TYPES
from airflow_provider_mysqlcdc.cdc.source.rules import captured_schema
from airflow_provider_mysqlcdc.cdc.source.schema import load_table_schema, missing_table_error, table_exists
from airflow_provider_mysqlcdc.protocol.registry import Generation, RememberedSchema
from airflow_provider_mysqlcdc.state.registry import PipelineState

SCHEMAS = "schemas"


def _types_differ(old: TableSchema, new: TableSchema) -> bool:
    """A column both schemas have changed its type (``COLUMN_TYPE``: DECIMAL(10,2) -> DECIMAL(10,4))
    or its collation (which orders and compares its values)."""
    before = {c.name: (c.column_type.lower(), c.collation) for c in old.columns}
    return any(c.name in before and before[c.name] != (c.column_type.lower(), c.collation) for c in new.columns)


def orders_differently(old: Column, new: Column) -> bool:
    """Whether a chunk key's values order differently after a DDL: another collation (the sink's
    ``_cdc_chunk`` and the finished splits' ranges follow the old order), or another kind of type."""
    before, after = old.data_type.lower(), new.data_type.lower()
    return old.collation != new.collation or (before != after and not (before in INTEGER_TYPES and after in INTEGER_TYPES))


def bridges(known: TableSchema, server: TableSchema, chunk_key: str) -> bool:
    """Whether changes written under ``known`` (keyed by ``chunk_key``) need it rather than the server's
    schema: a DDL the stream has not reached yet changed the key columns, removed the chunk key,
    changed a column's type, or added a column named like a change column."""
    return chunk_key in known.column_names and (
        server.key_columns != known.key_columns or chunk_key not in server.column_names
        or _types_differ(known, server) or server.reserved_name_problem() is not None)


def _file_name(table_id: TableId) -> str:
    return quote(table_id.quoted, safe="") + ".json"


class KnownSchemas:
    def __init__(self, state: PipelineState, generation: Generation | None = None):
        self.state = state
        #: the registry generation whose column rules (cdc/source/rules.py) describe the tables the
        #: server is asked about; a stream sets the one it applies (None: no rule, every column)
        self.generation = generation
        self._remembered: dict[TableId, TableSchema | None] = {}

    def remembered(self, table_id: TableId) -> TableSchema | None:
        if table_id not in self._remembered:
            record = self.state.storage.read_record(RememberedSchema, SCHEMAS, _file_name(table_id))
            self._remembered[table_id] = record.schema if record else None
        return self._remembered[table_id]

    def remember_planned(self, schema: TableSchema, captured_chunk_key: str | None) -> None:
        """A plan's schema of a table, unless the table is captured under ``captured_chunk_key`` and the
        remembered schema bridges to it (``bridges``): then the remembered one stays, for the stream's
        changes from before the DDL; the stream replaces it once it has applied them (or a re-snapshot
        under the new key is active)."""
        known = self.remembered(schema.table_id)
        if captured_chunk_key is not None and known is not None and bridges(known, schema, captured_chunk_key):
            return
        self.remember(schema)

    def remember(self, schema: TableSchema) -> None:
        if self.remembered(schema.table_id) != schema:
            self.state.storage.write_record(RememberedSchema(schema), SCHEMAS, _file_name(schema.table_id))
            self._remembered[schema.table_id] = schema

    def load(self, conn: pymysql.connections.Connection, table_id: TableId, *, remember: bool = True) -> TableSchema:
        """The server's schema of the table (remembered), else, for a table no longer on the server,
        the last one remembered."""
        if table_exists(conn, table_id):
            schema = self._captured(load_table_schema(conn, table_id))
            if remember:
                self.remember(schema)
            return schema
        remembered = self.remembered(table_id)
        if remembered is None:
            raise missing_table_error(table_id)
        return remembered

    def _captured(self, schema: TableSchema) -> TableSchema:
        """The server's schema as the generation's rule of the table captures it."""
        captured = self.generation.tables.get(schema.table_id) if self.generation is not None else None
        if captured is None or captured.table_rule is None:
            return schema
        return captured_schema(schema, captured.table_rule, chunk_key=captured.chunk_key)

    def for_stream(self, conn: pymysql.connections.Connection, table_id: TableId, chunk_key: str, *,
                   remember: bool = True) -> TableSchema:
        """The schema a stream applies the table's pending changes with: the server's, unless its key
        columns, chunk key or a column's type differ from the remembered schema's, or it has a column
        named like a change column (a DDL the stream has not reached yet changed them), then the
        remembered one."""
        return self.stream_schema(self.load(conn, table_id, remember=False), chunk_key, remember=remember)

    def stream_schema(self, server: TableSchema, chunk_key: str, *, remember: bool = True) -> TableSchema:
        """``for_stream``'s choice, given the server's schema of the table."""
        known = self.remembered(server.table_id)
        if known is not None and bridges(known, server, chunk_key):
            return known
        if remember:
            self.remember(server)
        return server
