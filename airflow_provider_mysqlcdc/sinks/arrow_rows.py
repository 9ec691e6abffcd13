"""Normalised rows to Arrow, with the metadata columns every sink table carries.

Column types mirror the source as closely as Delta Lake allows (it has no unsigned integers, no
DECIMAL beyond precision 38, no TIME):

=====================================  ==============================================
MySQL                                  Arrow / Delta
=====================================  ==============================================
TINYINT / SMALLINT / MEDIUMINT / INT   int8 / int16 / int32 / int32 (unsigned: next wider)
INT UNSIGNED, BIGINT                   int64
BIGINT UNSIGNED, BIT(64)               decimal(20, 0)
BIT(n < 64), YEAR                      int64, int16
FLOAT / DOUBLE                         float32 / float64
DECIMAL(p <= 38, s)                    decimal(p, s)
DECIMAL(p > 38, s)                     string (exact decimal text; Delta has no decimal256)
DATE / DATETIME / TIMESTAMP            date32 / timestamp[us] / timestamp[us, UTC]
TIME                                   int64 microseconds (Delta has no time type)
CHAR, VARCHAR, TEXT, ENUM, SET, JSON   string
BINARY, VARBINARY, BLOB, geometry      binary (geometry: MySQL's internal SRID + WKB)
=====================================  ==============================================

Metadata columns (``METADATA_COLUMNS``): ``_cdc_op`` (r/c/u of the last change), ``_cdc_binlog_file``
and ``_cdc_binlog_pos`` (where the row's version comes from: for snapshot rows the position they
are exact at, the split's high watermark or, for a partition no window change touched, its own
snapshot's low watermark: spark/chunk_job.py), ``_cdc_version`` (that offset as one sortable integer), ``_cdc_event_ts`` (event
time), and ``_cdc_chunk`` (the chunk key's order-preserving text, records/ordering.py, so that a
split's rows are a string range in any engine; in a routed sink table, the shard's tag and that
text: sinks/routing.py). A routed sink table also has ``_cdc_source_database`` and
``_cdc_source_table``, the names of the source table each row comes from.

A DATE, DATETIME or TIMESTAMP key column is nullable and has a companion, ``_cdc_zero_<name>``: a
key value with no calendar date (``ZeroDate``, records/values.py) is NULL in the column, as in any
other column, and its text in the companion, so that the row keeps a key of its own.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import Operation, TableTruncated, WindowChange
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableSchema
from airflow_provider_mysqlcdc.cdc.records.values import ZeroDate, decimal_text

#: the names of a routed table's shard each row comes from (sinks/routing.py)
SHARD_COLUMNS = ("_cdc_source_database", "_cdc_source_table")
#: the columns a sink table has besides the source's (the last two only in a routed table)
#: the chunk key's order-preserving text of each row: what a write replaces and a merge prunes files by
CHUNK_COLUMN = "_cdc_chunk"

METADATA_COLUMNS = ("_cdc_op", "_cdc_binlog_file", "_cdc_binlog_pos", "_cdc_version", "_cdc_event_ts", "_cdc_chunk",
                    *SHARD_COLUMNS)

_METADATA_FIELDS = [
    pa.field("_cdc_op", pa.string()),
    pa.field("_cdc_binlog_file", pa.string()),
    pa.field("_cdc_binlog_pos", pa.int64()),
    pa.field("_cdc_version", pa.int64()),
    pa.field("_cdc_event_ts", pa.timestamp("us", tz="UTC")),
    pa.field("_cdc_chunk", pa.string()),
]

_SIGNED = {"tinyint": pa.int8(), "smallint": pa.int16(), "mediumint": pa.int32(), "int": pa.int32(),
           "integer": pa.int32(), "bigint": pa.int64()}
_UNSIGNED = {"tinyint": pa.int16(), "smallint": pa.int32(), "mediumint": pa.int32(), "int": pa.int64(),
             "integer": pa.int64(), "bigint": pa.decimal128(20, 0)}
_BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
                 "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection"}


def arrow_type(column: Column) -> pa.DataType:
    if column.mask == "hash":  # 64 hex digits (cdc/records/masking.py)
        return pa.string()
    t = column.data_type
    if t in _SIGNED:
        return (_UNSIGNED if column.unsigned else _SIGNED)[t]
    if t == "bit":
        return pa.decimal128(20, 0) if column.bit_width >= 64 else pa.int64()
    if t == "year":
        return pa.int16()
    if t == "float":
        return pa.float32()
    if t == "double":
        return pa.float64()
    if t == "decimal":
        precision = column.numeric_precision or 65
        return pa.decimal128(precision, column.numeric_scale or 0) if precision <= 38 else pa.string()
    if t == "date":
        return pa.date32()
    if t == "datetime":
        return pa.timestamp("us")
    if t == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if t == "time":
        return pa.int64()
    if t in _BINARY_TYPES:
        return pa.binary()
    return pa.string()


#: the decimal digits an integer of each width holds
_INTEGER_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


def widest(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The sink type that holds every value of ``a`` and of ``b`` (Delta's type widening: an integer
    to a wider one or to a decimal with room for its digits, a float to a double, a decimal to one
    with at least its integer digits and its scale); None when there is none."""
    if a.equals(b):
        return a
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return a if a.bit_width >= b.bit_width else b
    if pa.types.is_floating(a) and pa.types.is_floating(b):
        return pa.float64()
    if all(pa.types.is_integer(t) or pa.types.is_decimal128(t) for t in (a, b)):
        digits = [(_INTEGER_DIGITS[t.bit_width], 0) if pa.types.is_integer(t) else (t.precision - t.scale, t.scale)
                  for t in (a, b)]
        whole, scale = max(d[0] for d in digits), max(d[1] for d in digits)
        return pa.decimal128(whole + scale, scale) if whole + scale <= 38 else None
    return None


def widens_into(own: pa.DataType, table: pa.DataType) -> bool:
    """Whether a column of type ``own`` fits a sink column of type ``table`` as it is (``table`` holds
    every value of ``own``)."""
    wider = widest(own, table)
    return wider is not None and wider.equals(table)


def sink_type_text(t: pa.DataType) -> str:
    """A type ``widest`` gives, as a route records it (``Route.column_types``)."""
    return str(t)


def sink_type_of(text: str) -> pa.DataType:
    """The type ``sink_type_text`` wrote."""
    if text.startswith("decimal128("):
        precision, scale = (int(n) for n in text[len("decimal128("):-1].split(","))
        return pa.decimal128(precision, scale)
    return pa.type_for_alias(text)


#: the temporal types whose key columns hold a ``ZeroDate`` where there is no calendar date
_TEMPORAL = ("date", "datetime", "timestamp")
#: the prefix of a temporal key column's companion (``zero_date_columns``)
ZERO_DATE_PREFIX = "_cdc_zero_"


def zero_date_columns(schema: TableSchema) -> dict[str, str]:
    """Each DATE, DATETIME or TIMESTAMP key column and its companion column: a key value with no
    calendar date (a ``ZeroDate``: ``0000-00-00``, ``2024-00-10``) is NULL in the key column, as in
    any other, and its text in the companion, so that such rows keep distinct keys."""
    return {k: ZERO_DATE_PREFIX + k for k in schema.key_columns if schema.column(k).data_type in _TEMPORAL}


def row_key_columns(schema: TableSchema) -> list[str]:
    """The sink columns that identify a row: the key columns, and the companions of temporal ones."""
    return [*schema.key_columns, *zero_date_columns(schema).values()]


def arrow_schema(schema: TableSchema) -> pa.Schema:
    """The sink table's columns for ``schema``. Only key columns are NOT NULL (but temporal ones:
    ``zero_date_columns``), so that the rows of a routed table's shard that lacks a column hold NULL there."""
    zeros = zero_date_columns(schema)
    widened = {} if schema.route is None else {n: sink_type_of(t) for n, t in schema.route.column_types}
    fields = [pa.field(c.name, _sink_type(c, widened), nullable=c.nullable or c.name not in schema.key_columns
                       or c.name in zeros) for c in schema.columns]
    shards = [pa.field(n, pa.string(), nullable=False) for n in SHARD_COLUMNS] if schema.route is not None else []
    return pa.schema(fields + [pa.field(z, pa.string()) for z in zeros.values()] + _METADATA_FIELDS + shards)


def _sink_type(column: Column, widened: dict[str, pa.DataType]) -> pa.DataType:
    """``column``'s type in the sink: its own (``arrow_type``), or in a shard of a routed table the
    wider one the table has (``widened``, from ``Route.column_types``), when its own widens into it
    (a DDL that made it wider than the table leaves it its own, which the table then refuses)."""
    own, table = arrow_type(column), widened.get(column.name.lower())
    return table if table is not None and widens_into(own, table) else own


def _to_arrow_value(target: pa.DataType) -> Callable[[Any], Any] | None:
    """What normalised (non-NULL) values need before pyarrow takes them as ``target``: TIME's
    timedelta as microseconds (an int64 column), an integer in a DECIMAL type (BIGINT UNSIGNED,
    BIT(64)) as Decimal, a Decimal in a string column (a DECIMAL wider than Arrow's) as its text;
    None for the other types, whose values go as they are. Chosen once per column, not per value."""
    if pa.types.is_int64(target):
        return _micros
    if pa.types.is_decimal(target):
        return _decimal_of_int
    if pa.types.is_string(target):
        return _decimal_text
    return None


def _zero_date_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _micros(value: Any) -> Any:
    return value // dt.timedelta(microseconds=1) if isinstance(value, dt.timedelta) else value


def _decimal_of_int(value: Any) -> Any:
    return decimal.Decimal(value) if isinstance(value, int) else value


def _decimal_text(value: Any) -> Any:
    return decimal_text(value) if isinstance(value, decimal.Decimal) else value


def data_schema(schema: TableSchema) -> pa.Schema:
    """The source columns only (no metadata columns)."""
    target = arrow_schema(schema)
    return pa.schema([f for f in target if f.name not in METADATA_COLUMNS])


def conform_to(data: pa.Table, target: pa.Schema) -> tuple[pa.Table, list[str]]:
    """``data`` with ``target``'s columns by name (absent ones NULL) and the names ``target`` lacks,
    for rows read under an older shape of the table (a staged split read before a DDL)."""
    names = set(data.column_names)
    columns = [_cast(data.column(f.name), f.type) if f.name in names else pa.nulls(data.num_rows, f.type)
               for f in target]
    return pa.Table.from_arrays(columns, schema=target), sorted(names - set(target.names))


def _cast(column: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    """``column`` as ``to``: the column itself where it has that type (a cast call costs more than
    the copy it avoids, and a batch conforms every column of every table it touches)."""
    return column if column.type == to else column.cast(to)


def rows_to_data_table(schema: TableSchema, rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Normalised rows (dicts) as an Arrow table of the source columns."""
    target = data_schema(schema)
    companions = {z: k for k, z in zero_date_columns(schema).items()}
    arrays = [pa.array([_zero_date_text(r.get(companions[f.name])) for r in rows], pa.string())
              if f.name in companions else _typed_array(f.type, [r.get(f.name) for r in rows]) for f in target]
    return pa.Table.from_arrays(arrays, schema=target)


def image_table(schema: TableSchema | None, images: Sequence[dict[str, Any]]) -> pa.Table:
    """Row images as Arrow columns, one per name the images hold (``columns_table``)."""
    names = dict.fromkeys(images[0]) if images else {}
    for image in images:
        if not image.keys() <= names.keys():  # the hot path: a subset test allocates nothing
            names.update(dict.fromkeys(image))
    return columns_table(schema, list(names), [[image.get(name) for image in images] for name in names])


def columns_table(schema: TableSchema | None, names: Sequence[str], columns: Sequence[list[Any]]) -> pa.Table:
    """Row images given by column (``columns[i]``: the values of ``names[i]``) as Arrow columns: typed
    like the sink's columns where ``schema`` has the column and its values fit the type, else as
    Arrow infers from the values (images written before a DDL that ``schema`` already reflects; the
    reader of such a table casts it to its own schema: ``conform_to``)."""
    target = data_schema(schema) if schema is not None else pa.schema([])
    arrays = []
    for name, values in zip(names, columns):
        index = target.get_field_index(name)
        typed = None
        if index >= 0:
            try:
                typed = _typed_array(target.field(index).type, values)
            except (TypeError, ValueError, OverflowError, pa.ArrowException):
                pass  # values of an older shape of the column
        arrays.append(typed if typed is not None else _inferred_array(name, values))
    zeros = {k: z for k, z in zero_date_columns(schema).items() if k in names} if schema is not None else {}
    for key in zeros:
        arrays.append(pa.array([_zero_date_text(v) for v in columns[list(names).index(key)]], pa.string()))
    return pa.Table.from_arrays(arrays, names=list(names) + list(zeros.values()))


def _typed_array(target: pa.DataType, values: list[Any]) -> pa.Array:
    convert = _to_arrow_value(target)
    if convert is not None:
        try:  # the values as they are first: only TIME's and wide DECIMALs' are not, and pyarrow refuses those
            return pa.array(values, type=target)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        values = [None if v is None else convert(v) for v in values]
    try:
        return pa.array(values, type=target)
    except pa.ArrowTypeError:
        if not (pa.types.is_date32(target) or pa.types.is_timestamp(target)):
            raise
    # a key's ZeroDate (text, which no date type takes): NULL here, its text in the companion column
    return pa.array([None if isinstance(v, str) else v for v in values], type=target)


def _inferred_array(name: str, values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except OverflowError:  # integers beyond int64 (BIGINT UNSIGNED, BIT(64))
        return pa.array([_decimal_of_int(v) for v in values])
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise TypeError(f"the values of column {name} do not make one Arrow column ({exc}); they differ in type "
                        "across the changes of one run") from exc


def event_timestamps(event_ms: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Event times in epoch milliseconds as UTC timestamps (microseconds, the sink's unit)."""
    return pc.multiply(event_ms.cast(pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))


def with_metadata(data: pa.Table, schema: TableSchema, *, ops: pa.Array | pa.ChunkedArray | str,
                  offsets: BinlogOffset | tuple[Any, Any, Any], event_ts_ms: pa.Array | pa.ChunkedArray | int,
                  chunks: Sequence[str] | pa.Array) -> pa.Table:
    """Append the metadata columns; scalars stand for the same value on every row. Per row,
    ``offsets`` is the (file, position, version) columns."""
    n = data.num_rows
    if isinstance(offsets, BinlogOffset):
        files, positions, versions = (pa.repeat(offsets.file, n), pa.repeat(offsets.position, n).cast(pa.int64()),
                                      pa.repeat(offsets.version, n).cast(pa.int64()))
    else:
        files, positions, versions = offsets
    if isinstance(event_ts_ms, int):
        stamps = pa.repeat(pa.scalar(event_ts_ms * 1000, pa.timestamp("us", tz="UTC")), n)
    else:
        stamps = event_timestamps(event_ts_ms)
    metadata = [pa.repeat(ops, n) if isinstance(ops, str) else ops, files, positions, versions, stamps,
                chunks if isinstance(chunks, (pa.Array, pa.ChunkedArray)) else pa.array(list(chunks), pa.string())]
    if schema.route is not None:
        metadata += [pa.repeat(schema.table_id.database, n), pa.repeat(schema.table_id.table, n)]
    target = arrow_schema(schema)
    columns = [data.column(f.name).cast(f.type) for f in target if f.name not in METADATA_COLUMNS]
    fields = [f for f in target if f.name in METADATA_COLUMNS]
    return pa.Table.from_arrays(columns + [m.cast(t.type) for m, t in zip(metadata, fields)], schema=target)


def python_values(column: Column, values: pa.ChunkedArray | pa.Array) -> list[Any]:
    """A sink column back to normalised Python values (undoing the Delta-compatible encodings)."""
    out = values.to_pylist()
    if column.data_type == "time":
        return [None if v is None else dt.timedelta(microseconds=v) for v in out]
    if column.data_type == "decimal" and pa.types.is_string(values.type):
        return [None if v is None else decimal.Decimal(v) for v in out]
    if column.data_type == "bit" or (column.unsigned and column.data_type == "bigint"):
        return [None if v is None else int(v) for v in out]
    return out


def column_values(table: pa.Table, schema: TableSchema, name: str) -> list[Any]:
    """A sink column back to normalised Python values, a key's ``ZeroDate`` from its companion."""
    values = python_values(schema.column(name), table.column(name))
    companion = zero_date_columns(schema).get(name)
    if companion is None or companion not in table.column_names:
        return values
    return [ZeroDate(z) if z is not None else v for v, z in zip(values, table.column(companion).to_pylist())]


def arrow_to_rows(table: pa.Table, schema: TableSchema) -> list[dict[str, Any]]:
    """Back from a sink table to normalised rows (for comparisons with the source)."""
    names = [c.name for c in schema.columns]
    columns = [column_values(table, schema, n) for n in names]
    return [dict(zip(names, values)) for values in zip(*columns)]


def drop_keys(data: pa.Table, schema: TableSchema, keys: set[tuple[Any, ...]]) -> pa.Table:
    """``data`` without the rows whose row key is in ``keys`` (normalised values)."""
    if not keys:
        return data
    key_values = zip(*(column_values(data, schema, k) for k in schema.key_columns))
    mask = pa.array([key not in keys for key in key_values], pa.bool_())
    return data.filter(mask)


def merge_changes_into_table(schema: TableSchema, data: pa.Table, changes: Sequence[WindowChange]) -> pa.Table:
    """Columnar window merge (changes in binlog order): rows whose key changed take their last image, or go;
    a ``TableTruncated`` removes every row before it (the rows are one split's)."""
    final: dict[tuple, dict | None] = {}
    for record in changes:
        if isinstance(record, TableTruncated):
            data, final = data.slice(0, 0), {}
            continue
        final[schema.key_of(record.image)] = None if record.op is Operation.DELETE else record.after
    if not final:
        return data
    kept = drop_keys(data, schema, set(final))
    added = rows_to_data_table(schema, [row for row in final.values() if row is not None])
    return pa.concat_tables([kept, added.cast(kept.schema)])
