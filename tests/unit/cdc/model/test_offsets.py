import json

import pytest

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset


def test_offsets_order_by_file_number_then_position():
    a = BinlogOffset("binlog.000009", 99999)
    b = BinlogOffset("binlog.000010", 4)
    c = BinlogOffset("binlog.000010", 120)
    assert a < b < c
    assert sorted([c, a, b]) == [a, b, c]
    assert max([a, c, b]) == c


def test_file_number_is_numeric_not_lexicographic():
    assert BinlogOffset("mysql-bin.999999", 4) < BinlogOffset("mysql-bin.1000000", 4)


def test_equality_ignores_gtid_and_hash_matches():
    a = BinlogOffset("binlog.000001", 400, gtid_set="0-1-5")
    b = BinlogOffset("binlog.000001", 400)
    assert a == b and hash(a) == hash(b)


def test_json_round_trip_keeps_gtid():
    a = BinlogOffset("binlog.000003", 12345, gtid_set="3E11FA47-71CA-11E1-9E33-C80AA9429562:1-77")
    assert BinlogOffset.from_json(a.to_json()) == a
    assert BinlogOffset.from_json(a.to_json()).gtid_set == a.gtid_set
    assert json.loads(a.to_json())["position"] == 12345


@pytest.mark.parametrize("text", ["binlog.000003:12345", '{"file": "binlog.000003", "position": 12345}'])
def test_parse_accepts_printed_and_json_forms(text):
    assert BinlogOffset.parse(text) == BinlogOffset("binlog.000003", 12345)
    assert BinlogOffset.parse(str(BinlogOffset.parse(text))) == BinlogOffset.parse(text)


@pytest.mark.parametrize(
    "text, fragment",
    [("binlog.000003", "Malformed binlog offset"), ("binlog:12", "Malformed binlog file name"),
     ("binlog.000003:abc", "Malformed binlog offset"), ('{"file": "binlog.000001"}', "Malformed binlog offset"),
     ("binlog.000001:2", "positions are integers >= 4"), ("{not json", "Malformed binlog offset JSON")],
)
def test_malformed_offsets_are_clear_errors(text, fragment):
    with pytest.raises(ConfigurationError, match=fragment):
        BinlogOffset.parse(text)


def test_bytes_between_offsets_spans_rotated_files():
    from airflow_provider_mysqlcdc.cdc.source.server import bytes_between

    sizes = [("binlog.000001", 1000), ("binlog.000002", 500), ("binlog.000003", 300)]
    a, b = BinlogOffset("binlog.000001", 900), BinlogOffset("binlog.000003", 120)
    assert bytes_between(a, b, sizes) == 100 + 500 + 120
    assert bytes_between(BinlogOffset("binlog.000002", 10), BinlogOffset("binlog.000002", 60), sizes) == 50
    assert bytes_between(b, a, sizes) == 0


def test_an_offset_keeps_which_binlog_it_belongs_to_through_json():
    offset = BinlogOffset("binlog.000007", 1234, gtid_set="0-1-42,1-2-7", server_id=3)
    again = BinlogOffset.from_json(offset.to_json())
    assert (again.gtid_set, again.server_id) == ("0-1-42,1-2-7", 3)
    assert BinlogOffset("binlog.000007", 1234) == offset  # they do not order or compare


def test_gtid_positions_are_read_per_domain():
    from airflow_provider_mysqlcdc.cdc.source.server import gtid_positions

    assert gtid_positions("0-1-42, 1-2-7") == {0: (1, 42), 1: (2, 7)}
    assert gtid_positions("") == gtid_positions(None) == {}


def test_an_offset_of_a_later_server_epoch_orders_after_every_offset_of_earlier_ones():
    primary = BinlogOffset("binlog.000900", 99999)
    replica = BinlogOffset("binlog.000001", 4, epoch=1)
    assert primary < replica and primary.version < replica.version
    assert replica.at("binlog.000002", 4) > replica and replica.at("binlog.000002", 4).epoch == 1
    assert BinlogOffset("binlog.000001", 4).in_epoch(1) == replica
    assert BinlogOffset("binlog.000001", 4).version == (1 << 32) | 4  # epoch 0: the version it always had


def test_the_epoch_survives_json_and_is_left_out_for_the_first_server():
    replica = BinlogOffset("binlog.000003", 120, gtid_set="0-2-9", server_id=2, epoch=3)
    again = BinlogOffset.from_json(replica.to_json())
    assert again == replica and again.epoch == 3
    assert "epoch" not in BinlogOffset("binlog.000003", 120).to_dict()


def test_a_binlog_file_number_too_large_for_an_epoch_is_a_clear_error():
    with pytest.raises(ConfigurationError, match="must stay below"):
        BinlogOffset("binlog.2000000", 4, epoch=1)
