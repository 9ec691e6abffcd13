"""What the stream's rules ask the source while they apply a batch, and the answer from the server.

The rules (applier.py) never open a connection themselves: they ask a ``TableSource``. The stream
job gives them ``ServerTables`` (the real server, through the retrying ``SourceConfig``); unit tests
give them tables of their own, so the rules are tested without a server.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from airflow_provider_mysqlcdc.cdc.binlog.listing import table_ddl_after
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.records.masking import ColumnMasks
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering
from airflow_provider_mysqlcdc.cdc.records.values import column_defaults
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.cdc.source.server import current_offset
from airflow_provider_mysqlcdc.protocol.registry import Generation
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.schemas import KnownSchemas
from airflow_provider_mysqlcdc.state.servers import ServerEpochs

#: an added column's DEFAULT is filled in place only if no DDL of the table follows within this many
#: binlog events (a later one may have changed the default); else the table is re-snapshotted
FILL_LOOKAHEAD_EVENTS = 200_000

#: ``TableSource.added_defaults``: False when the defaults cannot be trusted for the rows before the
#: statement (a later DDL changed the table, or lies too far ahead); None when the table has no row
Defaults = dict[str, Any] | None | Literal[False]


class TableSource(Protocol):
    def schemas_for_stream(self, chunk_keys: dict[TableId, str]) -> list[TableSchema]:
        """The schema each table's changes are written under (the server's, or the remembered one for
        a table that left the server or whose key a DDL ahead of the stream changed: state/schemas.py)."""

    def current_schemas(self, tables: list[TableId]) -> list[TableSchema]:
        """The tables' schemas as the server has them now (not remembered: the caller decides)."""

    def added_defaults(self, schema: TableSchema, columns: tuple[str, ...], offset: BinlogOffset) -> Defaults:
        """The values the server gives existing rows in ``columns``, which a DDL at ``offset`` added."""

    def schema_is_after(self, table_id: TableId, offset: BinlogOffset) -> bool:
        """Whether the server's schema of the table now is its schema right after a DDL at ``offset``:
        no later DDL of it lies between there and the head (within ``FILL_LOOKAHEAD_EVENTS``)."""

    def ordering(self, column: Column) -> KeyOrdering:
        """The database's order of ``column``'s values (text keys ask the server for their weights)."""

    def head(self) -> BinlogOffset:
        """The server's binlog head, in its epoch among the pipeline's servers."""


class ServerTables:
    """``TableSource`` answered by the source server. ``source`` may hold no password but the private
    file it is read from (a stream's Spark side: spark/connect.py)."""

    def __init__(self, source: SourceConfig, state: PipelineState, known: KnownSchemas):
        self.source = source
        self.state = state
        self.known = known

    def schemas_for_stream(self, chunk_keys: dict[TableId, str]) -> list[TableSchema]:
        return stream_schemas(self.source, self.known, chunk_keys, remember=True)

    def current_schemas(self, tables: list[TableId]) -> list[TableSchema]:
        return self.source.run(lambda conn: [self.known.load(conn, t, remember=False) for t in tables],
                               "reading table schemas")

    def added_defaults(self, schema: TableSchema, columns: tuple[str, ...], offset: BinlogOffset) -> Defaults:
        # asked only for a statement the server's schema is the result of (``schema_is_after``): no later
        # DDL can have changed these defaults
        def defaults(conn: Any) -> Defaults:
            values, masks = column_defaults(conn, schema, columns), ColumnMasks.of(schema, self.source.salt)
            return values if values is None or masks is None else masks.row(values)  # masked as any row

        return self.source.run(defaults, "reading the added columns' defaults")

    def schema_is_after(self, table_id: TableId, offset: BinlogOffset) -> bool:
        def none_later(conn: Any) -> bool:
            head = current_offset(conn).in_epoch(offset.epoch)  # the server the event was just read from
            return table_ddl_after(conn, table_id, offset, head, FILL_LOOKAHEAD_EVENTS) is False

        return self.source.run(none_later, "looking for later DDL of the table")

    def ordering(self, column: Column) -> KeyOrdering:
        return KeyOrdering(column, self.source.connect)

    def head(self) -> BinlogOffset:
        return self.source.run(ServerEpochs(self.state).head, "reading the binlog head")


def stream_schemas(source: SourceConfig, known: KnownSchemas, chunk_keys: dict[TableId, str], *,
                   remember: bool) -> list[TableSchema]:
    """The schema each table's changes are written under (``TableSource.schemas_for_stream``), in the
    order of ``chunk_keys``; ``remember``: record what the server has now (state/schemas.py)."""
    return source.run(lambda conn: [known.for_stream(conn, t, k, remember=remember) for t, k in chunk_keys.items()],
                      "reading table schemas")


def schemas_and_orderings(source: SourceConfig, state: PipelineState, generation: Generation,
                          tables: Any) -> tuple[list[TableSchema], dict[TableId, KeyOrdering]]:
    """What the executors decode and place a batch's changes by: each table's schema for the stream,
    and the database's order of its chunk key."""
    # executors never write schema files: only the driver remembers what it saw
    schemas = stream_schemas(source, KnownSchemas(state, generation), {t: generation.tables[t].chunk_key for t in sorted(tables)},
                             remember=False)
    # a table whose chunk key a DDL renamed or dropped is frozen at that DDL (stream_job.py): none of
    # its changes are placed into splits or applied, so it gets no ordering
    orderings = {s.table_id: KeyOrdering(s.column(generation.tables[s.table_id].chunk_key), source.connect)
                 for s in schemas if generation.tables[s.table_id].chunk_key in s.column_names}
    return schemas, orderings
