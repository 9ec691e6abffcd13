"""Placing offsets among the servers a pipeline has followed (state/servers.py), from the history
alone: which server read an offset, and where it stands."""

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.protocol.state import ServerEpoch, ServerHistory
from airflow_provider_mysqlcdc.state.registry import PipelineState
from airflow_provider_mysqlcdc.state.servers import HISTORY, ServerEpochs

HISTORY_OF_A_FAILOVER_AND_BACK = (ServerEpoch(0, 1, None), ServerEpoch(1, 2, "0-1-100"), ServerEpoch(2, 1, "0-2-300"))


def _epochs(tmp_path, history=HISTORY_OF_A_FAILOVER_AND_BACK) -> ServerEpochs:
    state = PipelineState(str(tmp_path))
    state.storage.write_record(ServerHistory(history), HISTORY)
    return ServerEpochs(state)


def test_an_offset_is_placed_in_the_epoch_of_the_server_that_read_it(tmp_path):
    epochs = _epochs(tmp_path, HISTORY_OF_A_FAILOVER_AND_BACK[:2])
    assert epochs.epoch_of(BinlogOffset("binlog.000009", 4, gtid_set="0-1-50", server_id=1)) == 0
    assert epochs.epoch_of(BinlogOffset("binlog.000001", 4, gtid_set="0-2-150", server_id=2)) == 1


def test_a_server_followed_twice_is_placed_by_the_gtid_position_it_read_at(tmp_path):
    epochs = _epochs(tmp_path)
    assert epochs.epoch_of(BinlogOffset("binlog.000009", 4, gtid_set="0-1-50", server_id=1)) == 0
    assert epochs.epoch_of(BinlogOffset("binlog.000012", 4, gtid_set="0-1-350", server_id=1)) == 2


def test_an_offset_of_a_server_not_followed_yet_is_placed_in_the_next_epoch(tmp_path):
    epochs = _epochs(tmp_path, HISTORY_OF_A_FAILOVER_AND_BACK[:2])
    placed = epochs.place(BinlogOffset("binlog.000001", 4, gtid_set="0-3-400", server_id=3))
    assert placed.epoch == 2 and placed > BinlogOffset("binlog.000100", 4, epoch=1)


def test_without_a_history_or_a_server_id_offsets_keep_their_epoch(tmp_path):
    assert ServerEpochs(PipelineState(str(tmp_path))).epoch_of(BinlogOffset("binlog.000001", 4, server_id=7)) == 0
    assert _epochs(tmp_path).epoch_of(BinlogOffset("binlog.000001", 4, epoch=1)) == 1
