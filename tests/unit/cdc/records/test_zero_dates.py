"""Dates with no calendar date in key columns: one text from both read paths (records/values.py),
placed where the server orders them (records/ordering.py), NULL plus a companion in the sink
(sinks/arrow_rows.py), and a sink table written before taking them (sinks/delta/sink.py)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_mysqlcdc.cdc.binlog.row_decoder import date_value, datetime_value, timestamp_value
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering, encode_sort_key
from airflow_provider_mysqlcdc.cdc.records.values import ValueNormalizer, ZeroDate, zero_date_text
from airflow_provider_mysqlcdc.sinks.arrow_rows import arrow_schema, arrow_to_rows, rows_to_data_table
from airflow_provider_mysqlcdc.sinks.delta.sink import DeltaSink

T = TableId("db", "t")


def _schema(data_type: str, fsp: int | None = None) -> TableSchema:
    return TableSchema(T, (Column("k", data_type, data_type, False, datetime_precision=fsp),
                           Column("other", data_type, data_type, False, datetime_precision=fsp)), ("k",))


def _packed(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return (year * 13 + month) << 22 | day << 17 | hour << 12 | minute << 6 | second


@pytest.mark.parametrize("data_type, fsp, selected, decoded, text", [
    ("date", None, "2024-00-10", date_value(2024 << 9 | 10, zero_date_text(True, 0)), "2024-00-10"),
    ("datetime", 0, "0000-00-00 00:00:00", datetime_value(0, 0, zero_date_text(False, 0)), "0000-00-00 00:00:00"),
    ("datetime", 3, "2024-05-00 01:02:03.400", datetime_value(_packed(2024, 5, 0, 1, 2, 3), 400000,
                                                              zero_date_text(False, 3)), "2024-05-00 01:02:03.400"),
    ("timestamp", 6, "0000-00-00 00:00:00.000000", timestamp_value(0, 0, zero_date_text(False, 6)),
     "0000-00-00 00:00:00.000000"),
    # the library's zero TIMESTAMP is the epoch
    ("timestamp", 0, "0000-00-00 00:00:00", dt.datetime(1970, 1, 1), "0000-00-00 00:00:00"),
])
def test_a_key_date_with_no_calendar_date_is_the_servers_text_from_either_path_and_null_elsewhere(
        data_type, fsp, selected, decoded, text):
    normalizer = ValueNormalizer(_schema(data_type, fsp))
    from_select = normalizer.row({"k": selected, "other": selected})
    from_binlog = normalizer.row({"k": decoded, "other": None})  # a decoder's layout keeps the text in keys only
    assert from_select == from_binlog == {"k": text, "other": None}
    assert isinstance(from_select["k"], ZeroDate) and isinstance(from_binlog["k"], ZeroDate)


def test_decoders_give_the_text_only_where_the_layout_keeps_it():
    packed = _packed(2024, 0, 10, 12)
    assert datetime_value(packed, 5) is None
    assert datetime_value(packed, 5, zero_date_text(False, 6)) == "2024-00-10 12:00:00.000005"
    assert timestamp_value(0, 0) is None and timestamp_value(0, 0, zero_date_text(False, 0)) == "0000-00-00 00:00:00"


@pytest.mark.parametrize("data_type", ["date", "datetime", "timestamp"])
def test_dates_with_no_calendar_date_sort_where_the_server_puts_them(data_type):
    """The server compares year, month, day and time as numbers: '2024-00-10' lies between the last
    instant of 2023 and 2024-01-01, '0000-00-00' before every real date."""
    utc = dt.timezone.utc if data_type == "timestamp" else None
    real = (lambda y, m, d: dt.date(y, m, d)) if data_type == "date" else \
        (lambda y, m, d: dt.datetime(y, m, d, tzinfo=utc))
    suffix = "" if data_type == "date" else " 00:00:00"
    ordered = [ZeroDate("0000-00-00" + suffix), ZeroDate("0000-05-06" + suffix), real(1970, 1, 2), real(2023, 12, 31),
               ZeroDate("2024-00-00" + suffix), ZeroDate("2024-00-10" + suffix), real(2024, 1, 1),
               ZeroDate("2024-02-30" + suffix), real(2024, 3, 1), ZeroDate("2024-05-00" + suffix), real(2024, 5, 1)]
    keys = KeyOrdering(Column("k", data_type, data_type, False)).sort_keys(ordered)
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    texts = [encode_sort_key(k) for k in keys]
    assert texts == sorted(texts)


def test_a_real_date_keeps_the_chunk_text_it_had_before_zero_dates_were_ordered():
    ordering = KeyOrdering(Column("k", "datetime", "datetime", False))
    value = dt.datetime(2024, 5, 6, 7, 8, 9, 10)
    micros = (value - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
    assert encode_sort_key(ordering.sort_key(value)) == encode_sort_key(micros)  # sinks written before still match


def test_the_sink_holds_null_in_the_key_and_the_text_in_its_companion_and_reads_the_key_back():
    schema = _schema("datetime", 0)
    rows = [{"k": ZeroDate("2024-00-10 12:00:00"), "other": None}, {"k": dt.datetime(2024, 1, 1), "other": None}]
    table = rows_to_data_table(schema, rows)
    assert table.column("k").to_pylist() == [None, dt.datetime(2024, 1, 1)]
    assert table.column("_cdc_zero_k").to_pylist() == ["2024-00-10 12:00:00", None]
    assert arrow_to_rows(table, schema) == rows


def test_a_sink_table_written_before_lets_its_temporal_key_hold_null_and_gains_the_companion(tmp_path):
    schema, sink = _schema("date"), DeltaSink(str(tmp_path))
    before = pa.schema([f.with_nullable(False) if f.name == "k" else f for f in arrow_schema(schema)
                        if not f.name.startswith("_cdc_zero_")])
    DeltaTable.create(sink.table_uri(T), before)

    sink.prepare(schema)

    fields = {f.name: f for f in pa.schema(DeltaTable(sink.table_uri(T)).schema().to_arrow())}
    assert fields["k"].nullable and "_cdc_zero_k" in fields
