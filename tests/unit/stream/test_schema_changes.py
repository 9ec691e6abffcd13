"""Every DDL row of the event table (docs/events-and-types.md, "Event -> what happens to the sink")
through the stream's rules (stream/schema_changes.py), without Spark or a server: what each
statement does to the sink table, to the drift record, and to the table's later changes."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind as Kind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec

from .harness import (
    Pipeline,
    T,
    U,
    changes,
    column,
    ddl,
    delete,
    insert,
    off,
    schema,
    table_change,
    update,
    with_columns,
)


def _later_changes_of_both(p: Pipeline) -> None:
    p.batch(changes(schema(T), insert(T, 20, id=9, v="after")), changes(schema(U), insert(U, 21, id=9, v="after")))


def test_truncate_removes_the_rows_older_than_the_statement(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    p.snapshot(T, {"id": 1, "v": "a"}, {"id": 2, "v": "b"})
    p.batch(changes(schema(T), insert(T, 1, id=3, v="c")),
            ddl(2, "TRUNCATE TABLE t", table_change(Kind.TRUNCATED, T)),
            changes(schema(T), insert(T, 3, id=4, v="d")))
    assert p.rows(T) == {4: {"id": 4, "v": "d"}}
    assert p.drift(T) == []  # followed exactly: nothing to re-snapshot


def test_an_added_column_with_a_constant_default_gives_the_older_rows_that_value(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    p.snapshot(T, {"id": 1, "v": "a"})
    p.alter(T, with_columns(schema(T), column("c", fills_existing_rows=True, default_constant=True)))
    p.tables.defaults = {"c": 5}
    p.batch(ddl(1, "ALTER TABLE t ADD COLUMN c INT DEFAULT 5", table_change(Kind.ALTERED, T, added_columns=("c",))),
            changes(p.tables.server[T], insert(T, 2, id=2, v="b", c=6)))
    assert p.rows(T) == {1: {"id": 1, "v": "a", "c": 5}, 2: {"id": 2, "v": "b", "c": 6}}
    assert p.tables.asked_defaults == [("c",)] and p.drift(T) == []


def test_an_added_column_whose_default_cannot_be_trusted_is_drift(tmp_path):
    """An expression default, a generated column, or a later DDL of the table (the source says False)."""
    p = Pipeline(tmp_path, schema(T))
    p.snapshot(T, {"id": 1, "v": "a"})
    p.alter(T, with_columns(schema(T), column("c", fills_existing_rows=True, default_constant=True),
                            column("ts", "datetime", column_type="datetime", fills_existing_rows=True)))
    p.tables.defaults = False
    p.batch(ddl(1, "ALTER TABLE t ADD c INT DEFAULT 5, ADD ts DATETIME DEFAULT NOW()",
                table_change(Kind.ALTERED, T, added_columns=("c", "ts"))))
    assert p.rows(T) == {1: {"id": 1, "v": "a", "c": None, "ts": None}}
    assert p.drift(T) == [(Kind.ALTERED, off(1))]


def test_an_added_nullable_column_without_default_needs_nothing(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    p.snapshot(T, {"id": 1, "v": "a"})
    p.alter(T, with_columns(schema(T), column("c")))
    p.batch(ddl(1, "ALTER TABLE t ADD COLUMN c INT", table_change(Kind.ALTERED, T, added_columns=("c",))))
    assert p.rows(T) == {1: {"id": 1, "v": "a", "c": None}}
    assert p.drift(T) == [] and p.tables.asked_defaults == []


def test_a_dropped_or_renamed_column_is_drift_and_the_table_streams_on(tmp_path):
    p = Pipeline(tmp_path, schema(T, column("c")))
    p.snapshot(T, {"id": 1, "v": "a", "c": 1})
    p.alter(T, schema(T))
    p.batch(ddl(1, "ALTER TABLE t DROP COLUMN c", table_change(Kind.ALTERED, T)),
            changes(schema(T), insert(T, 2, id=2, v="b")))
    assert p.drift(T) == [(Kind.ALTERED, off(1))]
    assert p.rows(T)[2]["v"] == "b"


def test_a_changed_key_freezes_the_table_and_the_others_stream_on(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    p.alter(T, schema(T, key=("id", "v")))
    p.batch(changes(schema(T), insert(T, 1, id=1, v="before")),
            ddl(2, "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)", table_change(Kind.ALTERED, T)))
    _later_changes_of_both(p)
    assert p.drift(T) == [(Kind.KEY_CHANGED, off(2))]
    assert p.rows(T) == {1: {"id": 1, "v": "before"}}
    assert p.rows(U) == {9: {"id": 9, "v": "after"}}


def test_a_type_the_sink_cannot_take_freezes_the_table_and_a_longer_text_evolves_it(tmp_path):
    p = Pipeline(tmp_path, schema(T, column("w")), schema(U, column("w", "varchar")))
    p.snapshot(T, {"id": 1, "v": "a", "w": 1})
    p.snapshot(U, {"id": 1, "v": "a", "w": "x"})
    p.alter(T, schema(T, column("w", "varchar")))
    p.alter(U, schema(U, column("w", "varchar", column_type="varchar(200)", char_max_length=200)))
    p.batch(ddl(1, "ALTER TABLE t MODIFY w VARCHAR(10)", table_change(Kind.ALTERED, T)),
            ddl(2, "ALTER TABLE u MODIFY w VARCHAR(200)", table_change(Kind.ALTERED, U)),
            changes(p.tables.server[T], insert(T, 3, id=2, v="b", w="two")),
            changes(p.tables.server[U], insert(U, 4, id=2, v="b", w="y" * 150)))
    assert p.drift(T) == [(Kind.TYPE_CHANGED, off(1))] and p.rows(T) == {1: {"id": 1, "v": "a", "w": 1}}
    assert p.drift(U) == [] and p.rows(U)[2]["w"] == "y" * 150


def test_int_to_bigint_widens_an_iceberg_column_in_place_and_freezes_a_delta_table(tmp_path, sink_format):
    """delta-rs cannot widen a column in place (the table is re-snapshotted); Iceberg promotes int to long."""
    p = Pipeline(tmp_path, schema(T, column("w")))
    p.snapshot(T, {"id": 1, "v": "a", "w": 1})
    p.alter(T, schema(T, column("w", "bigint")))
    p.batch(ddl(1, "ALTER TABLE t MODIFY w BIGINT", table_change(Kind.ALTERED, T)),
            changes(p.tables.server[T], insert(T, 3, id=2, v="b", w=2**40)))
    if sink_format.startswith("delta"):
        assert p.drift(T) == [(Kind.TYPE_CHANGED, off(1))] and p.rows(T) == {1: {"id": 1, "v": "a", "w": 1}}
    else:
        assert p.drift(T) == [] and p.rows(T) == {1: {"id": 1, "v": "a", "w": 1}, 2: {"id": 2, "v": "b", "w": 2**40}}


def test_another_alter_reloads_the_schema_and_freezes_nothing(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    p.batch(ddl(1, "CREATE INDEX iv ON t (v)", table_change(Kind.ALTERED, T)),
            changes(schema(T), insert(T, 2, id=1, v="a")))
    assert p.drift(T) == [] and p.rows(T) == {1: {"id": 1, "v": "a"}}


def test_a_dropped_table_is_frozen_and_its_later_changes_are_not_applied(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    p.batch(changes(schema(T), insert(T, 1, id=1, v="before")), ddl(2, "DROP TABLE t", table_change(Kind.DROPPED, T)))
    _later_changes_of_both(p)
    assert p.drift(T) == [(Kind.DROPPED, off(2))]
    assert p.rows(T) == {1: {"id": 1, "v": "before"}} and 9 in p.rows(U)


def test_a_table_renamed_away_is_frozen(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    p.snapshot(T, {"id": 1, "v": "a"})
    p.batch(ddl(1, "RENAME TABLE t TO t_old", table_change(Kind.RENAMED, T, other=TableId("shop", "t_old"))))
    _later_changes_of_both(p)
    assert p.drift(T) == [(Kind.RENAMED, off(1))]
    assert p.rows(T) == {1: {"id": 1, "v": "a"}} and 9 in p.rows(U)


def test_a_name_replaced_by_another_table_is_frozen_and_a_later_create_is_noted(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    p.batch(ddl(1, "CREATE OR REPLACE TABLE t (id INT PRIMARY KEY)", table_change(Kind.REPLACED, T)),
            ddl(2, "DROP TABLE t", table_change(Kind.DROPPED, T)),
            ddl(3, "CREATE TABLE t (id INT PRIMARY KEY)", table_change(Kind.CREATED, T)))
    _later_changes_of_both(p)
    assert p.drift(T) == [(Kind.REPLACED, off(1)), (Kind.CREATED, off(3))]


def test_partition_operations_are_drift_and_the_table_keeps_streaming(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    p.batch(ddl(1, "ALTER TABLE t TRUNCATE PARTITION p0", table_change(Kind.ROWS_CHANGED, T)),
            changes(schema(T), insert(T, 2, id=1, v="a")))
    assert p.drift(T) == [(Kind.ROWS_CHANGED, off(1))] and p.rows(T) == {1: {"id": 1, "v": "a"}}


def test_statements_on_tables_not_captured_do_nothing(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    other = TableId("shop", "not_captured")
    p.batch(ddl(1, "DROP TABLE not_captured", table_change(Kind.DROPPED, other)),
            changes(schema(T), insert(T, 2, id=1, v="a")))
    assert p.drift(other) == [] and p.drift(T) == [] and p.rows(T) == {1: {"id": 1, "v": "a"}}


def test_a_frozen_table_stays_frozen_for_a_restarted_stream_replaying_the_batch(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    batch = (ddl(1, "DROP TABLE t", table_change(Kind.DROPPED, T)),
             changes(schema(T), insert(T, 2, id=1, v="a"), update(T, 3, {"id": 1, "v": "a"}, {"id": 1, "v": "b"})))
    p.batch(*batch)
    p.applier = p.new_applier()
    done = p.batch(*batch, batch_id=0)
    assert done.skipped == 2 and p.drift(T) == [(Kind.DROPPED, off(1))]


def test_a_table_created_or_renamed_into_a_patterns_reach_is_recorded_once_for_the_next_run(tmp_path):
    from airflow_provider_mysqlcdc.state.new_tables import new_tables, pending_new_tables

    p = Pipeline(tmp_path, schema(T))
    p.job.table_patterns, p.job.exclude_tables = ["shop.order_\\d+"], ["shop.order_9"]
    order_1, order_2, excluded, other = (TableId("shop", n) for n in ("order_1", "order_2", "order_9", "orders"))
    created = ddl(1, "CREATE TABLE order_1 (id INT PRIMARY KEY)", table_change(Kind.CREATED, order_1))
    p.batch(created,
            ddl(2, "CREATE TABLE order_9 (id INT PRIMARY KEY)", table_change(Kind.CREATED, excluded)),
            ddl(3, "CREATE TABLE orders (id INT PRIMARY KEY)", table_change(Kind.CREATED, other)),
            ddl(4, "RENAME TABLE t TO order_2", table_change(Kind.RENAMED, T, other=order_2)))
    p.batch(created, batch_id=0)  # a replayed batch records nothing twice
    seen = new_tables(p.state).tables
    assert [(t.table, t.offset) for t in seen] == [(order_1.quoted, off(1)), (order_2.quoted, off(4))]
    assert seen[0].statement.startswith("CREATE TABLE order_1")
    assert [t.table for t in pending_new_tables(p.state, {T, order_1})] == [order_2.quoted]


def test_without_table_patterns_a_created_table_is_not_recorded(tmp_path):
    from airflow_provider_mysqlcdc.state.new_tables import new_tables

    p = Pipeline(tmp_path, schema(T))
    p.batch(ddl(1, "CREATE TABLE order_1 (id INT PRIMARY KEY)", table_change(Kind.CREATED, TableId("shop", "order_1"))))
    assert new_tables(p.state).tables == ()


def test_the_status_names_a_recorded_table_until_a_run_captures_it(tmp_path, capsys):
    from airflow_provider_mysqlcdc.status import pipeline_status, print_status

    p = Pipeline(tmp_path, schema(T))
    p.job.table_patterns = ["shop.order_\\d+"]
    p.batch(ddl(1, "CREATE TABLE order_1 (id INT PRIMARY KEY)", table_change(Kind.CREATED, TableId("shop", "order_1"))))
    assert [t["table"] for t in pipeline_status(p.state.location)["new_tables"]] == ["shop.order_1"]
    print_status(p.state.location)
    printed = capsys.readouterr().out
    assert "shop.order_1" in printed and "the next DAG run captures it" in printed


def test_with_schema_changes_fail_a_captured_tables_ddl_stops_the_stream_before_it_naming_it(tmp_path):
    import pytest

    from airflow_provider_mysqlcdc.cdc.errors import SchemaChangeRefused

    p = Pipeline(tmp_path, schema(T), schema(U))
    p.job.schema_changes = "fail"
    p.snapshot(T, {"id": 1, "v": "a"})
    p.batch(ddl(1, "CREATE TABLE other (id INT PRIMARY KEY)", table_change(Kind.CREATED, TableId("shop", "other"))))
    with pytest.raises(SchemaChangeRefused, match=r"'TRUNCATE TABLE t' at .* changes shop.t.*schema_changes='evolve'"):
        p.batch(changes(schema(T), insert(T, 2, id=2, v="b")),
                ddl(3, "TRUNCATE TABLE t", table_change(Kind.TRUNCATED, T)),
                changes(schema(T), insert(T, 4, id=3, v="c")))
    assert p.rows(T) == {1: {"id": 1, "v": "a"}, 2: {"id": 2, "v": "b"}}  # the changes before it, nothing of it
    p.job.schema_changes = "evolve"  # the user's decision; the batch runs again
    p.applier = p.new_applier()
    p.batch(changes(schema(T), insert(T, 2, id=2, v="b")),
            ddl(3, "TRUNCATE TABLE t", table_change(Kind.TRUNCATED, T)),
            changes(schema(T), insert(T, 4, id=3, v="c")), batch_id=1)
    assert p.rows(T) == {3: {"id": 3, "v": "c"}}


def test_an_unknown_schema_change_policy_is_refused_naming_the_choices(tmp_path):
    import pytest

    from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
    from airflow_provider_mysqlcdc.protocol.jobs import StreamJob

    with pytest.raises(ConfigurationError, match="schema_changes must be one of evolve, lenient, ignore, fail, got "
                                                 "'exception'"):
        StreamJob(str(tmp_path / "state"), SinkSpec(str(tmp_path / "lake")), schema_changes="exception")


def sink_columns(p: Pipeline, table: TableId) -> set[str]:
    return {n for n in p.sink.column_names(table) if not n.startswith("_cdc_")}


def test_lenient_keeps_a_dropped_column_with_its_values_and_new_rows_null_and_records_no_drift(tmp_path):
    p = Pipeline(tmp_path, schema(T, column("c")))
    p.job.schema_changes = "lenient"
    p.snapshot(T, {"id": 1, "v": "a", "c": 1})
    p.alter(T, schema(T))
    p.batch(ddl(1, "ALTER TABLE t DROP COLUMN c", table_change(Kind.ALTERED, T)),
            changes(schema(T), insert(T, 2, id=2, v="b")))
    assert p.drift(T) == [] and sink_columns(p, T) == {"id", "v", "c"}
    data = {r["id"]: r["c"] for r in p.sink.read(T).to_pylist()}
    assert data == {1: 1, 2: None}


def test_lenient_adds_a_renamed_or_untrustworthy_default_column_with_older_rows_null_and_no_drift(tmp_path):
    p = Pipeline(tmp_path, schema(T, column("c")))
    p.job.schema_changes = "lenient"
    p.snapshot(T, {"id": 1, "v": "a", "c": 1})
    p.alter(T, schema(T, column("d"), column("ts", "datetime", column_type="datetime", fills_existing_rows=True)))
    p.tables.defaults = False
    p.batch(ddl(1, "ALTER TABLE t RENAME COLUMN c TO d, ADD ts DATETIME DEFAULT NOW()",
                table_change(Kind.ALTERED, T, added_columns=("ts",))),
            changes(p.tables.server[T], insert(T, 2, id=2, v="b", d=5)))
    assert p.drift(T) == []
    assert p.rows(T) == {1: {"id": 1, "v": "a", "d": None, "ts": None}, 2: {"id": 2, "v": "b", "d": 5, "ts": None}}


def test_lenient_still_fills_an_added_columns_constant_default(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    p.job.schema_changes = "lenient"
    p.snapshot(T, {"id": 1, "v": "a"})
    p.alter(T, with_columns(schema(T), column("c", fills_existing_rows=True, default_constant=True)))
    p.tables.defaults = {"c": 5}
    p.batch(ddl(1, "ALTER TABLE t ADD COLUMN c INT DEFAULT 5", table_change(Kind.ALTERED, T, added_columns=("c",))))
    assert p.rows(T) == {1: {"id": 1, "v": "a", "c": 5}} and p.drift(T) == []


def test_ignore_keeps_the_sinks_columns_through_an_added_column_and_a_restart(tmp_path):
    p = Pipeline(tmp_path, schema(T))
    p.job.schema_changes = "ignore"
    p.snapshot(T, {"id": 1, "v": "a"})
    p.alter(T, with_columns(schema(T), column("c", fills_existing_rows=True, default_constant=True)))
    p.tables.defaults = {"c": 5}
    p.batch(ddl(1, "ALTER TABLE t ADD COLUMN c INT DEFAULT 5", table_change(Kind.ALTERED, T, added_columns=("c",))),
            changes(p.tables.server[T], insert(T, 2, id=2, v="b", c=6)))
    p.applier = p.new_applier()  # restarted: the schema it loads has c, the sink table still not
    p.batch(changes(p.tables.server[T], update(T, 3, {"id": 2, "v": "b", "c": 6}, {"id": 2, "v": "B", "c": 7})))
    assert sink_columns(p, T) == {"id", "v"} and p.drift(T) == [] and p.tables.asked_defaults == []
    assert {r["id"]: r["v"] for r in p.sink.read(T).to_pylist()} == {1: "a", 2: "B"}


@pytest.mark.parametrize("policy", ["lenient", "ignore"])
def test_a_changed_key_still_freezes_the_table_under_every_policy(tmp_path, policy):
    p = Pipeline(tmp_path, schema(T), schema(U))
    p.job.schema_changes = policy
    p.alter(T, schema(T, key=("id", "v")))
    p.batch(changes(schema(T), insert(T, 1, id=1, v="before")),
            ddl(2, "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)", table_change(Kind.ALTERED, T)))
    _later_changes_of_both(p)
    assert p.drift(T) == [(Kind.KEY_CHANGED, off(2))] and p.rows(U) == {9: {"id": 9, "v": "after"}}


# --- changes applied with the table's schema as of them, not the server's of now ----------------------


@pytest.mark.parametrize("same_batch", [True, False], ids=["same-batch", "earlier-batch"])
def test_under_fail_the_changes_before_a_refused_add_column_leave_the_sinks_schema_as_it_was(tmp_path, same_batch):
    """The server has the added column already; the changes written before the statement do not, and
    neither does the sink after them: resuming under evolve then gives the older rows its DEFAULT."""
    from airflow_provider_mysqlcdc.cdc.errors import SchemaChangeRefused

    p = Pipeline(tmp_path, schema(T))
    p.snapshot(T, {"id": 1, "v": "a"})
    p.job.schema_changes = "fail"
    p.alter(T, with_columns(schema(T), column("c", fills_existing_rows=True, default_constant=True)))
    p.tables.defaults = {"c": 7}
    before = changes(schema(T), insert(T, 1, id=2, v="b"), update(T, 2, {"id": 1, "v": "a"}, {"id": 1, "v": "A"}))
    add = ddl(3, "ALTER TABLE t ADD COLUMN c INT DEFAULT 7", table_change(Kind.ALTERED, T, added_columns=("c",)))
    after = changes(p.tables.server[T], insert(T, 4, id=3, v="c", c=8))
    batches = [(before, add, after)] if same_batch else [(before,), (add, after)]
    if not same_batch:
        p.batch(*batches[0])
    with pytest.raises(SchemaChangeRefused):
        p.batch(*batches[-1])
    assert sink_columns(p, T) == {"id", "v"}
    assert {r["id"]: r["v"] for r in p.sink.read(T).to_pylist()} == {1: "A", 2: "b"}
    p.job.schema_changes = "evolve"  # the user's decision; the refused batch runs again in a restarted stream
    p.applier = p.new_applier()
    p.batch(*batches[-1], batch_id=p.next_batch - 1)
    assert p.rows(T) == {1: {"id": 1, "v": "A", "c": 7}, 2: {"id": 2, "v": "b", "c": 7}, 3: {"id": 3, "v": "c", "c": 8}}
    assert p.drift(T) == []


@pytest.mark.parametrize("policy", ["lenient", "ignore"])
@pytest.mark.parametrize("same_batch", [True, False], ids=["same-batch", "earlier-batch"])
def test_changes_written_before_a_drop_column_keep_their_values_in_the_column_the_sink_keeps(tmp_path, policy,
                                                                                            same_batch):
    p = Pipeline(tmp_path, schema(T, column("c")))
    p.job.schema_changes = policy
    p.snapshot(T, {"id": 1, "v": "a", "c": 1}, {"id": 2, "v": "b", "c": 2})
    old = p.tables.server[T]
    p.alter(T, schema(T))  # the server has dropped c already when the stream reads the changes before
    before = changes(old, update(T, 1, {"id": 2, "v": "b", "c": 2}, {"id": 2, "v": "b", "c": 22}),
                     insert(T, 2, id=5, v="e", c=5))
    drop = ddl(3, "ALTER TABLE t DROP COLUMN c", table_change(Kind.ALTERED, T))
    after = changes(schema(T), insert(T, 4, id=6, v="f"), update(T, 5, {"id": 1, "v": "a"}, {"id": 1, "v": "A"}),
                    delete(T, 6, id=5, v="e"), insert(T, 7, id=5, v="E"))
    for batch in [(before, drop, after)] if same_batch else [(before,), (drop, after)]:
        p.batch(*batch)
    assert p.drift(T) == [] and sink_columns(p, T) == {"id", "v", "c"}
    # each row keeps the last value the binlog gave c (an update after the DROP leaves it), NULL where
    # it was inserted after the DROP (also a key deleted and inserted again in one batch)
    assert {r["id"]: (r["v"], r["c"]) for r in p.sink.read(T).to_pylist()} == {
        1: ("A", 1), 2: ("b", 22), 5: ("E", None), 6: ("f", None)}


def test_changes_of_one_table_under_two_table_maps_in_one_batch_are_each_applied_with_their_own(tmp_path):
    """No DDL between them in the batch (the reader met none): the schema each run of changes carries
    still decides its columns, and the table's writer follows it."""
    p = Pipeline(tmp_path, schema(T))
    p.job.schema_changes = "lenient"
    p.snapshot(T, {"id": 1, "v": "a"})
    wider = schema(T, column("c"))
    p.alter(T, wider)
    p.batch(changes(schema(T), insert(T, 1, id=2, v="b")),
            changes(wider, insert(T, 2, id=3, v="c", c=3), update(T, 3, {"id": 2, "v": "b", "c": None},
                                                                 {"id": 2, "v": "B", "c": 2})),
            changes(schema(T), update(T, 4, {"id": 1, "v": "a"}, {"id": 1, "v": "A"})))
    assert p.rows(T) == {1: {"id": 1, "v": "A", "c": None}, 2: {"id": 2, "v": "B", "c": 2},
                         3: {"id": 3, "v": "c", "c": 3}}


@pytest.mark.parametrize(("policy", "said"), [
    ("evolve", "shop.t: column(s) d added to the sink; column(s) c gone from the source; drift (altered): the next "
               "DAG run re-snapshots the table"),
    ("lenient", "shop.t: column(s) d added to the sink; column(s) c gone from the source, kept in the sink with "
                "their last values"),
    ("ignore", "shop.t: column(s) d not written (the sink keeps its columns); column(s) c gone from the source, "
               "kept in the sink with their last values"),
    ("fail", "shop.t: refused: the stream stopped before it, nothing of it applied"),
])
def test_each_ddl_is_one_log_line_saying_what_the_policy_did_and_the_tables_status_shows_it(tmp_path, caplog,
                                                                                             capsys, policy, said):
    from airflow_provider_mysqlcdc.cdc.errors import SchemaChangeRefused
    from airflow_provider_mysqlcdc.status import print_status

    p = Pipeline(tmp_path, schema(T, column("c")))
    p.job.schema_changes = policy
    p.snapshot(T, {"id": 1, "v": "a", "c": 1})
    p.alter(T, schema(T, column("d")))
    statement = "ALTER TABLE t RENAME COLUMN c TO d"
    try:
        p.batch(ddl(1, statement, table_change(Kind.ALTERED, T)))
    except SchemaChangeRefused:
        assert policy == "fail"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("schema change at")]
    assert lines == [f"schema change at {off(1)}: {statement} (shop.t altered) -- schema_changes={policy}: {said}"]
    print_status(p.state.location)
    assert f"DDL at {off(1)} ({statement}), schema_changes={policy}: {said.removeprefix('shop.t: ')}" in capsys.readouterr().out


def _two_ddls_ahead(p: Pipeline) -> list:
    """DROP COLUMN c, then ADD COLUMN n, both ahead of the stream (the server has both), with changes
    before, between and after them, each under its own columns."""
    p.snapshot(T, {"id": 1, "v": "a", "c": 1})
    between, after = schema(T), schema(T, column("n"))
    p.alter(T, after)
    p.tables.later_ddl = {(T, off(2))}
    return [changes(schema(T, column("c")), update(T, 1, {"id": 1, "v": "a", "c": 1}, {"id": 1, "v": "a", "c": 11})),
            ddl(2, "ALTER TABLE t DROP COLUMN c", table_change(Kind.ALTERED, T, removes_columns=True)),
            changes(between, insert(T, 3, id=2, v="b")),
            ddl(4, "ALTER TABLE t ADD COLUMN n INT", table_change(Kind.ALTERED, T, added_columns=("n",))),
            changes(after, insert(T, 5, id=3, v="c", n=3))]


@pytest.mark.parametrize("policy", ["evolve", "lenient"])
def test_a_ddl_the_stream_meets_behind_another_of_its_table_is_followed_by_the_columns_of_its_changes(tmp_path, caplog,
                                                                                                      policy):
    """The server's schema is past the first statement: its changes bring their own columns; what it
    dropped is not known there, which is drift where the policy follows columns exactly."""
    p = Pipeline(tmp_path, schema(T, column("c")))
    p.job.schema_changes = policy
    p.batch(*_two_ddls_ahead(p))
    assert {r["id"]: (r["v"], r["c"], r["n"]) for r in p.sink.read(T).to_pylist()} == {
        1: ("a", 11, None), 2: ("b", None, None), 3: ("c", None, 3)}
    assert p.drift(T) == ([(Kind.ALTERED, off(2))] if policy == "evolve" else [])
    assert "its changes bring their columns (a later DDL of the table lies ahead" in caplog.text


def test_a_key_change_ahead_of_the_servers_schema_freezes_the_table_at_the_first_change_under_the_new_key(tmp_path):
    p = Pipeline(tmp_path, schema(T), schema(U))
    p.job.schema_changes = "lenient"
    p.snapshot(T, {"id": 1, "v": "a"})
    p.alter(T, schema(T, column("n"), key=("id", "v")))
    p.tables.later_ddl = {(T, off(2))}
    p.batch(changes(schema(T), insert(T, 1, id=2, v="b")),
            ddl(2, "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)", table_change(Kind.ALTERED, T)),
            changes(schema(T, key=("id", "v")), insert(T, 3, id=3, v="c")),
            ddl(4, "ALTER TABLE t ADD COLUMN n INT", table_change(Kind.ALTERED, T, added_columns=("n",))),
            changes(schema(U), insert(U, 5, id=9, v="after")))
    assert p.drift(T) == [(Kind.KEY_CHANGED, off(3))]
    assert {r["id"] for r in p.sink.read(T).to_pylist()} == {1, 2} and p.rows(U) == {9: {"id": 9, "v": "after"}}


def test_a_key_change_ahead_of_the_servers_schema_freezes_the_table_even_first_in_a_restarted_stream(tmp_path):
    """No change of the table before the statement in this stream run: the sink's key is the one the
    pipeline keeps for it (remembered, since the server's already differs)."""
    p = Pipeline(tmp_path, schema(T))
    p.job.schema_changes = "ignore"
    p.snapshot(T, {"id": 1, "v": "a"})
    p.alter(T, schema(T, column("n"), key=("v",)))
    p.tables.later_ddl = {(T, off(2))}
    p.batch(ddl(2, "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (v)", table_change(Kind.ALTERED, T)),
            changes(schema(T, key=("v",)), insert(T, 3, id=1, v="b")))
    assert p.drift(T) == [(Kind.KEY_CHANGED, off(3))]
    assert {r["id"]: r["v"] for r in p.sink.read(T).to_pylist()} == {1: "a"}


def test_a_ddl_met_behind_another_that_neither_adds_nor_removes_columns_is_followed_without_drift(tmp_path):
    """A type (INT to BIGINT, which an Iceberg table widens in place), a default, an index: the
    changes' own columns are all the sink needs, under evolve too."""
    p = Pipeline(tmp_path, schema(T, column("c")))
    p.snapshot(T, {"id": 1, "v": "a", "c": 1})
    p.alter(T, schema(T, column("c", "varchar"), column("n")))
    p.tables.later_ddl = {(T, off(2))}
    p.batch(ddl(2, "ALTER TABLE t ALTER COLUMN c SET DEFAULT 5", table_change(Kind.ALTERED, T)),
            changes(schema(T, column("c")), insert(T, 3, id=2, v="b", c=2)))
    assert p.drift(T) == [] and p.rows(T) == {1: {"id": 1, "v": "a", "c": 1, "n": None},
                                              2: {"id": 2, "v": "b", "c": 2, "n": None}}
