"""MySQL's low watermark, from binlog event listings as MySQL 8 writes them (``SHOW BINLOG EVENTS``
rows: a ``Gtid`` event opens each transaction) and the ``Executed_Gtid_Set`` read with the position.
Only MariaDB runs in the suite, so these recorded sequences are how the logic is tested."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.binlog.listing import ListedEvent
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.reading.low_watermark import GtidSet, InFlightTransactions, transactions_in

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def transaction(file: str, start: int, number: int) -> list[ListedEvent]:
    """One row-based transaction as MySQL lists it: Gtid, Query BEGIN, Table_map, Write_rows, Xid."""
    at = [start, start + 79, start + 160, start + 220, start + 280, start + 311]
    kinds = ["Gtid", "Query", "Table_map", "Write_rows", "Xid"]
    infos = [f"SET @@SESSION.GTID_NEXT= '{UUID.upper()}:{number}'", "BEGIN", "table_id: 92 (shop.orders)",
             "table_id: 92 flags: STMT_END_F", "COMMIT /* xid=41 */"]
    return [ListedEvent(file, at[i], kinds[i].lower(), at[i + 1], infos[i]) for i in range(5)]


def binlog(file: str, count: int, first_number: int = 1, start: int = 126) -> list[ListedEvent]:
    events = []
    for i in range(count):
        events += transaction(file, start + i * 311, first_number + i)
    return events


def lister(events: list[ListedEvent]):
    """``list_events(after, head)`` over a recorded binlog; it also records what was asked."""
    asked = []

    def list_events(after: BinlogOffset, head: BinlogOffset):
        asked.append((after, head))
        return [e for e in events if e.start >= after and e.end <= head]

    list_events.asked = asked
    return list_events


def head_at(events: list[ListedEvent], executed: str) -> BinlogOffset:
    last = events[-1]
    return BinlogOffset(last.file, last.end_position, gtid_set=executed)


def test_gtid_sets_parse_as_mysql_prints_them():
    executed = GtidSet.parse(f"{UUID.upper()}:1-5:7,\n4b2f3e8a-0000-11e1-9e33-c80aa9429562:1-3")
    assert (UUID, 5) in executed and (UUID, 7) in executed and (UUID, 6) not in executed
    assert ("4b2f3e8a-0000-11e1-9e33-c80aa9429562", 3) in executed and (UUID, 8) not in executed
    assert (UUID, 1) not in GtidSet.parse("")


def test_transactions_are_found_by_their_gtid_events():
    found = transactions_in(binlog("binlog.000003", 3, first_number=10))
    assert [t.gtid for t in found] == [(UUID, 10), (UUID, 11), (UUID, 12)]
    assert found[0].start == BinlogOffset("binlog.000003", 126)


def test_with_every_transaction_committed_the_low_watermark_is_the_position_read():
    events = binlog("binlog.000003", 4)
    head = head_at(events, f"{UUID}:1-4")
    assert InFlightTransactions().low_watermark(head, lister(events)) == head


def test_a_transaction_written_but_not_yet_committed_moves_the_low_watermark_back_to_its_start():
    """Group commit: transactions 5 and 6 are in the binlog (the position is past them) but their
    InnoDB commit, which adds them to gtid_executed, has not happened: the snapshot cannot see them."""
    events = binlog("binlog.000003", 6)
    head = head_at(events, f"{UUID}:1-4")
    low = InFlightTransactions().low_watermark(head, lister(events))
    assert low == BinlogOffset("binlog.000003", 126 + 4 * 311) < head  # where transaction 5 starts


def test_a_reader_lists_each_stretch_of_binlog_once_and_forgets_what_committed_since():
    events = binlog("binlog.000003", 6)
    tracker, list_events = InFlightTransactions(), lister(events)
    first = tracker.low_watermark(head_at(events[:20], f"{UUID}:1-2"), list_events)  # 4 written, 2 committed
    assert first == BinlogOffset("binlog.000003", 126 + 2 * 311)
    more = events + transaction("binlog.000003", 126 + 6 * 311, 7)
    list_events = lister(more)
    second = tracker.low_watermark(head_at(more, f"{UUID}:1-6"), list_events)  # 3 and 4 committed, 7 in flight
    assert second == BinlogOffset("binlog.000003", 126 + 6 * 311)
    # only the binlog written after the first look was listed
    assert [(after.file, after.position) for after, _ in list_events.asked] == [("binlog.000003",
                                                                                 events[19].end_position)]
    third = tracker.low_watermark(head_at(more, f"{UUID}:1-7"), lister(more))
    assert third == head_at(more, f"{UUID}:1-7") and tracker.pending == []


def test_the_first_look_lists_the_current_file_from_its_start():
    events = binlog("binlog.000007", 3)
    list_events = lister(events)
    InFlightTransactions().low_watermark(head_at(events, f"{UUID}:1-3"), list_events)
    assert list_events.asked[0][0] == BinlogOffset("binlog.000007", 4)


def test_without_gtids_the_low_watermark_is_the_position_read():
    events = binlog("binlog.000003", 2)
    head = BinlogOffset("binlog.000003", events[-1].end_position)  # gtid_mode=OFF: no executed set
    list_events = lister(events)
    assert InFlightTransactions().low_watermark(head, list_events) == head and list_events.asked == []
