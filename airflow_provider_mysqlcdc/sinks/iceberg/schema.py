"""An Iceberg table's columns as the sink sees them (sinks/iceberg/sink.py): its Arrow schema, which type
changes it takes in place, and rows shaped as its columns.

Iceberg keeps one 32-bit integer type for Arrow's narrower ones, widens a column in place only from
int to long, float to double and to a decimal of a larger precision and the same scale; pyiceberg
hands out large strings and binaries for a table whose schema it evolved, which the sink's rows
never hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_provider_mysqlcdc.sinks.arrow_rows import widens_into

if TYPE_CHECKING:
    from pyiceberg.table import Table


def arrow_schema_of(table: Table) -> pa.Schema:
    """The table's columns in Arrow, strings and binaries as the sink's rows have them (pyiceberg
    gives the large types for a table whose schema it evolved)."""
    schema = table.schema().as_arrow()
    return pa.schema([f.with_type(_SMALL.get(f.type, f.type)) for f in schema])


def file_schema_of(table: Table) -> pa.Schema:
    """The columns of Parquet files written for the table apart and committed by path: its own,
    without Iceberg's field ids (pyiceberg maps such files' columns by name)."""
    return pa.schema([f.remove_metadata() for f in arrow_schema_of(table)])


_SMALL = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}


def _iceberg_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type Iceberg keeps ``t`` as (it has one 32-bit integer type for the narrower ones)."""
    return pa.int32() if pa.types.is_integer(t) and t.bit_width < 32 else t


def holds(column: pa.DataType, values: pa.DataType) -> bool:
    """Whether a column of Iceberg type ``column`` takes values of ``values``, cast on write (an INT
    into a long column, or into the DECIMAL a routed table took from a wider shard)."""
    own, table = _iceberg_type(values), _iceberg_type(column)
    return own.equals(table) or widens_into(own, table)


def promotable(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether Iceberg widens a column of ``old`` to ``new`` in place: int to long, float to double,
    a decimal to one of a larger precision and the same scale."""
    old, new = _iceberg_type(old), _iceberg_type(new)
    if pa.types.is_integer(old) and pa.types.is_integer(new):
        return new.bit_width >= old.bit_width
    if pa.types.is_floating(old) and pa.types.is_floating(new):
        return new.bit_width >= old.bit_width
    if pa.types.is_decimal128(old) and pa.types.is_decimal128(new):
        return new.scale == old.scale and new.precision >= old.precision
    return False


def evolution(table: Table, target: pa.Schema) -> pa.Schema | None:
    """The columns of ``target`` the table lacks, or holds in a narrower type Iceberg promotes, or as
    NOT NULL where ``target`` has NULLs, as ``union_by_name`` takes them (nullable: only a new table
    has required columns); None when it has them all. A type no promotion reaches is left to the
    write's cast: a value that fits is written, one that does not is the table's refusal."""
    current = arrow_schema_of(table)
    changes = []
    for field in target:
        held = current.field(field.name) if field.name in current.names else None
        if held is None or (not holds(held.type, field.type) and promotable(held.type, field.type)):
            changes.append(field.with_nullable(True))
        elif field.nullable and not held.nullable:
            changes.append(held.with_nullable(True))
    return pa.schema(changes) if changes else None


def as_table_rows(rows: pa.Table | None, table: Table) -> pa.Table:
    """``rows`` as the table's columns: by name, cast to its types, its columns they lack as NULL
    (columns the source dropped since), theirs it lacks left out (``_cdc_op`` of a deleting change)."""
    target = arrow_schema_of(table)
    if rows is None:
        return target.empty_table()
    columns = [rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
               for f in target]
    return pa.Table.from_arrays(columns, schema=target)
