"""The finished-split filter on synthetic records (integer keys need no database)."""

import pytest

from airflow_provider_mysqlcdc.cdc.binlog.split_filter import FinishedSplitFilter
from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.records import ChangeRecord, Operation
from airflow_provider_mysqlcdc.cdc.model.schema import Column, TableId
from airflow_provider_mysqlcdc.cdc.model.split import FinishedSplit, SnapshotSplit
from airflow_provider_mysqlcdc.cdc.records.ordering import KeyOrdering

T = TableId("db", "t")
OTHER = TableId("db", "other")
ID = Column(name="id", data_type="int", column_type="int", nullable=False)


def at(file_no: int, pos: int) -> BinlogOffset:
    return BinlogOffset(f"binlog.{file_no:06}", pos)


def finished(index, start, end, hw) -> FinishedSplit:
    return FinishedSplit(SnapshotSplit(T, index, "id", start, end), hw)


def record(key, offset, op=Operation.CREATE, table=T) -> ChangeRecord:
    row = {"id": key}
    return ChangeRecord(op, table, row if op is Operation.DELETE else None,
                        None if op is Operation.DELETE else row, offset)


@pytest.fixture()
def split_filter():
    splits = [finished(0, None, 100, at(1, 500)), finished(1, 100, 200, at(2, 300)), finished(2, 200, None, at(1, 900))]
    return FinishedSplitFilter(splits, {T: KeyOrdering(ID)})


def test_starts_at_the_smallest_high_watermark(split_filter):
    assert split_filter.start_offset() == at(1, 500)
    assert split_filter.max_high_watermark(T) == at(2, 300)


@pytest.mark.parametrize("key, offset, emitted", [
    (5, at(1, 500), False),   # at the split's HW: already in the split
    (5, at(1, 501), True),    # after it
    (-10**9, at(1, 600), True),  # open below
    (100, at(1, 600), False),  # boundary belongs to the next split, whose HW is later
    (150, at(2, 300), False),
    (150, at(2, 301), True),
    (199, at(1, 999), False),
    (200, at(1, 901), True),  # last split, open above
    (10**12, at(1, 800), False),
    (150, at(3, 4), True),    # past the table's largest HW: pure binlog phase
])
def test_emit_iff_after_the_high_watermark_of_the_split_holding_the_key(split_filter, key, offset, emitted):
    assert split_filter.should_emit(record(key, offset)) is emitted
    assert split_filter.should_emit(record(key, offset, Operation.DELETE)) is emitted


def test_tables_without_finished_splits_are_not_emitted(split_filter):
    assert split_filter.filter([record(1, at(9, 4), table=OTHER), record(1, at(9, 4))]) == [False, True]


def test_incomplete_split_sets_are_refused():
    with pytest.raises(ConfigurationError, match="incomplete or duplicated"):
        FinishedSplitFilter([finished(0, None, 100, at(1, 5)), finished(2, 200, None, at(1, 5))], {T: KeyOrdering(ID)})
    with pytest.raises(ConfigurationError, match="No finished splits"):
        FinishedSplitFilter([], {}).start_offset()
