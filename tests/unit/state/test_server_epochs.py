"""Placing offsets among the servers a pipeline has followed through failovers (``state/epochs.py``,
``servers.json``), from the history alone: which server read an offset, and where it stands."""

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.protocol.servers import ServerEpoch, ServerHistory
from airflow_provider_mysqlcdc.state.epochs import epoch_of, place, place_split
from airflow_provider_mysqlcdc.state.registry import SERVERS, PipelineState, captured_tables

FAILOVER = ServerHistory((ServerEpoch(0, 1, None), ServerEpoch(1, 2, "0-1-100")))
FAILOVER_AND_BACK = ServerHistory(FAILOVER.epochs + (ServerEpoch(2, 1, "0-2-300"),))
T = TableId("shop", "t")


def test_an_offset_is_placed_in_the_epoch_of_the_server_that_read_it():
    assert epoch_of(FAILOVER, BinlogOffset("binlog.000009", 4, gtid_set="0-1-50", server_id=1)) == 0
    assert epoch_of(FAILOVER, BinlogOffset("binlog.000001", 4, gtid_set="0-2-150", server_id=2)) == 1


def test_a_server_followed_twice_is_placed_by_the_gtid_position_it_read_at():
    assert epoch_of(FAILOVER_AND_BACK, BinlogOffset("binlog.000009", 4, gtid_set="0-1-50", server_id=1)) == 0
    assert epoch_of(FAILOVER_AND_BACK, BinlogOffset("binlog.000012", 4, gtid_set="0-1-350", server_id=1)) == 2


def test_an_offset_of_a_server_not_followed_yet_is_placed_in_the_next_epoch():
    placed = place(FAILOVER, BinlogOffset("binlog.000001", 4, gtid_set="0-3-400", server_id=3))
    assert placed.epoch == 2 and placed > BinlogOffset("binlog.000100", 4, epoch=1)


def test_without_a_history_or_a_server_id_offsets_keep_their_epoch():
    assert epoch_of(ServerHistory(), BinlogOffset("binlog.000001", 4, server_id=7)) == 0
    assert epoch_of(FAILOVER, BinlogOffset("binlog.000001", 4, epoch=1)) == 1


def test_a_generation_is_loaded_with_its_high_watermarks_placed_among_the_servers(tmp_path):
    state = PipelineState(str(tmp_path))
    on_replica = BinlogOffset("binlog.000001", 400, gtid_set="0-2-150", server_id=2)
    state.commit(captured_tables([FinishedSplit(SnapshotSplit(T, 0, "id"), on_replica)]))
    assert state.latest().tables[T].splits[0].high_watermark.epoch == 0  # no failover known yet
    state.storage.write_record(FAILOVER, SERVERS)
    assert state.latest().tables[T].splits[0].high_watermark.epoch == 1


def test_a_resnapshot_read_on_the_new_primary_replaces_splits_read_on_the_old_one_once_placed():
    from airflow_provider_mysqlcdc.planning.changes import next_tables
    from airflow_provider_mysqlcdc.protocol.actions import PlanAction
    from airflow_provider_mysqlcdc.protocol.plans import TablePlan
    from airflow_provider_mysqlcdc.protocol.registry import CapturedTable, Generation

    split = SnapshotSplit(T, 0, "id")
    old = FinishedSplit(split, BinlogOffset("binlog.000900", 4, gtid_set="0-1-90", server_id=1))
    new = FinishedSplit(split, BinlogOffset("binlog.000001", 4, gtid_set="0-2-150", server_id=2))  # lower file number
    current = Generation(1, {T: CapturedTable("id", [old])})
    plan = TablePlan(T, "id", PlanAction.RESNAPSHOT, [split])
    assert next_tables(current, [plan], [new], exact=True)[T].splits == [old]  # unplaced: taken for older
    landed = next_tables(current, [plan], [place_split(FAILOVER, new)], exact=True)[T].splits
    assert [f.high_watermark.server_id for f in landed] == [2]
