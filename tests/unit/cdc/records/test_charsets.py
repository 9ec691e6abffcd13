"""The one codec per MySQL character set (cdc/records/charsets.py); test_charsets.py holds every
set's repertoire to the server."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.records.charsets import codec_name, decodable


def test_the_library_s_codec_names_mean_the_server_s_charsets():
    assert codec_name("cp1252") == codec_name("latin1") == "mysqlcdc_latin1"
    assert codec_name("koi8_r") == codec_name("koi8r")
    assert codec_name("utf8") == codec_name("utf8mb4") == codec_name(None) == "utf-8"


def test_latin1_is_windows_1252_with_its_holes_as_the_server_fills_them():
    assert bytes(range(0x80, 0x90)).decode(codec_name("latin1")) == "€\x81‚ƒ„…†‡ˆ‰Š‹Œ\x8dŽ\x8f"


def test_utf16_is_big_endian_and_utf16le_little():
    assert "é😀".encode("utf-16-be").decode(codec_name("utf16")) == "é😀"
    assert "é😀".encode("utf-16-le").decode(codec_name("utf16le")) == "é😀"


def test_a_sequence_the_server_maps_otherwise_counts_only_at_a_character_start():
    big5 = codec_name("big5")
    assert b"\xa2\xce".decode(big5) == "\ufffd"  # the server's mapping, not Python's duplicate of U+5345
    # the same two bytes across a character boundary: the trail byte of one character, the lead of the next
    assert b"\xb1\xa2\xce\xa4".decode(big5) == b"\xb1\xa2\xce\xa4".decode("big5")
    assert b"\xf9\xd9".decode(big5) == "\u58bb"  # an ETEN addition Python's big5 cannot decode


def test_an_unknown_charset_is_a_clear_error():
    assert not decodable("klingon")
    with pytest.raises(ConfigurationError, match="klingon.*CHARACTER SET utf8mb4"):
        codec_name("klingon")


def test_preflight_names_a_column_in_a_charset_it_cannot_decode_and_the_fix():
    from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId, TableSchema
    from airflow_provider_mysqlcdc.cdc.source.preflight import charset_problem

    columns = (Column("id", "int", "int(11)", False), Column("ok", "varchar", "varchar(5)", True, charset="macce"),
               Column("k", "text", "text", True, charset="klingon"))
    assert charset_problem(TableSchema(TableId("d", "t"), columns[:2], ("id",))) is None
    problem = charset_problem(TableSchema(TableId("d", "t"), columns, ("id",)))
    assert "k (klingon)" in problem and "MODIFY `k` ... CHARACTER SET utf8mb4" in problem
