"""The class test of the schema-change policies: every DDL form x every ``schema_changes`` policy x
where the changes written before the statement lie (in its batch, or in an earlier one), each with
changes after it and the batch replayed by a restarted stream, on each sink format (conftest.py),
through the stream's rules. Each change carries the schema it was written under, as the executors
send it (``TableChanges.schema``); the outcome is held to a model of what docs/events-and-types.md
says each policy does, and ``fail`` to the sink as it was before the statement, then, resumed under
``evolve``, to ``evolve``'s outcome."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_provider_mysqlcdc.cdc.errors import SchemaChangeRefused
from airflow_provider_mysqlcdc.cdc.model.records import TableEventKind as Kind
from airflow_provider_mysqlcdc.cdc.model.schema import TableId, TableSchema

from .harness import SINK_FORMAT, Pipeline, T, changes, column, ddl, insert, off, schema, table_change, update

BEFORE = schema(T, column("c"))  # id INT (the key), v VARCHAR(20), c INT
AT = dt.datetime(2024, 5, 1, 10, 0)


@dataclass(frozen=True)
class Form:
    """A DDL of ``BEFORE``: the server's schema after it, what it adds, its DEFAULTs' answer, how the
    sink takes it (None: followed; else the freezing kind, per format)."""

    statement: str
    after: TableSchema | None  # None: the table left the name (renamed)
    added: tuple[str, ...] = ()
    defaults: Any = None
    freezes: Kind | None = None
    freezes_delta_only: bool = False
    drift_under_evolve: bool = False  # a column change the sink cannot follow exactly: drift under evolve, fail

    def frozen(self) -> bool:
        return self.freezes is not None and (not self.freezes_delta_only or SINK_FORMAT.value.startswith("delta"))


def _retyped(name: str, data_type: str, column_type: str, **kwargs: Any) -> TableSchema:
    columns = tuple(dataclasses.replace(c, data_type=data_type, column_type=column_type, **kwargs) if c.name == name
                    else c for c in BEFORE.columns)
    return TableSchema(T, columns, BEFORE.primary_key)


FORMS = {
    "add-constant-default": Form("ALTER TABLE t ADD COLUMN n INT DEFAULT 7",
                                 schema(T, column("c"), column("n", fills_existing_rows=True, default_constant=True)),
                                 added=("n",), defaults={"n": 7}),
    "add-expression-default": Form("ALTER TABLE t ADD COLUMN ts DATETIME DEFAULT NOW()",
                                   schema(T, column("c"), column("ts", "datetime", column_type="datetime",
                                                                 fills_existing_rows=True)),
                                   added=("ts",), defaults=False, drift_under_evolve=True),
    "add-nullable": Form("ALTER TABLE t ADD COLUMN n2 INT", schema(T, column("c"), column("n2")), added=("n2",)),
    "drop": Form("ALTER TABLE t DROP COLUMN c", schema(T), drift_under_evolve=True),
    "rename": Form("ALTER TABLE t RENAME COLUMN c TO d", schema(T, column("d")), drift_under_evolve=True),
    "change": Form("ALTER TABLE t CHANGE c d BIGINT", schema(T, column("d", "bigint")), drift_under_evolve=True),
    "longer-text": Form("ALTER TABLE t MODIFY v VARCHAR(40)", _retyped("v", "varchar", "varchar(40)")),
    "int-to-bigint": Form("ALTER TABLE t MODIFY c BIGINT", _retyped("c", "bigint", "bigint(20)"),
                          freezes=Kind.TYPE_CHANGED, freezes_delta_only=True),
    "int-to-text": Form("ALTER TABLE t MODIFY c VARCHAR(20)",
                        _retyped("c", "varchar", "varchar(20)", charset="utf8mb4", collation="utf8mb4_bin"),
                        freezes=Kind.TYPE_CHANGED),
    "reorder": Form("ALTER TABLE t MODIFY c INT FIRST",
                    TableSchema(T, (BEFORE.columns[2], *BEFORE.columns[:2]), BEFORE.primary_key)),
    "key-change": Form("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)", schema(T, column("c"), key=("id", "v")),
                       freezes=Kind.KEY_CHANGED),
    "table-rename": Form("RENAME TABLE t TO t_old", None, freezes=Kind.RENAMED),
}
POLICIES = ("evolve", "lenient", "ignore", "fail")


def _source_value(form: Form, row: dict[str, Any], name: str) -> Any:
    """A column's value in a row image written under the form's schema after the statement."""
    if name in row:
        return row[name]
    return {"n": 8, "ts": AT, "n2": None, "d": row["c"]}[name]


def _image(form: Form, row: dict[str, Any]) -> dict[str, Any]:
    assert form.after is not None
    value = {**row, "c": str(row["c"])} if form.statement.endswith("c VARCHAR(20)") else row
    return {n: _source_value(form, value, n) for n in form.after.column_names}


SNAPSHOT = [{"id": 1, "v": "a", "c": 1}, {"id": 2, "v": "b", "c": 2}]


def _batches(form: Form, same_batch: bool) -> list[tuple]:
    """The changes before the statement (under ``BEFORE``), the statement, the changes after it."""
    before = changes(BEFORE, update(T, 1, {"id": 2, "v": "b", "c": 2}, {"id": 2, "v": "b", "c": 22}),
                     insert(T, 2, id=5, v="e", c=5))
    change = table_change(Kind.RENAMED, T, other=TableId("shop", "t_old")) if form.after is None else \
        table_change(Kind.ALTERED, T, added_columns=form.added)
    statement = ddl(3, form.statement, change)
    later: tuple = ()
    if form.after is not None:  # a table renamed away has no later changes under its old name
        one = {"id": 1, "v": "a", "c": 1}
        later = (changes(form.after, insert(T, 4, **_image(form, {"id": 6, "v": "f", "c": 60})),
                         update(T, 5, _image(form, one), {**_image(form, one), "v": "A"})),)
    return [(before, statement, *later)] if same_batch else [(before,), (statement, *later)]


def _expected(form: Form, policy: str) -> tuple[set[str], dict[int, dict[str, Any]], list[Kind]]:
    """The sink's source columns, its rows, and the table's drift, as the docs say ``policy`` leaves them."""
    rows = {r["id"]: dict(r) for r in SNAPSHOT}
    rows[2]["c"] = 22
    rows[5] = {"id": 5, "v": "e", "c": 5}
    columns = set(BEFORE.column_names)
    if form.frozen():
        return columns, rows, [form.freezes]
    assert form.after is not None
    written = [n for n in form.after.column_names if policy != "ignore" or n in columns]
    columns |= set(written)
    for name in written:
        if name not in BEFORE.column_names:  # added: older rows get a constant DEFAULT, else NULL
            for row in rows.values():
                row[name] = 7 if name == "n" else None
    one = _image(form, {"id": 1, "v": "a", "c": 1})
    rows[1].update({n: one[n] for n in written}, v="A")
    six = _image(form, {"id": 6, "v": "f", "c": 60})
    rows[6] = {n: six.get(n) if n in written else None for n in columns}
    for row in rows.values():
        for name in columns - row.keys():
            row[name] = None
    drift = [Kind.ALTERED] if form.drift_under_evolve and policy in ("evolve", "fail") else []
    return columns, rows, drift


def _sink(p: Pipeline) -> tuple[set[str], dict[int, dict[str, Any]]]:
    data = p.sink.read(T).to_pylist()
    columns = {n for n in p.sink.column_names(T) if not n.startswith("_cdc_")}
    return columns, {r["id"]: {n: _plain(r[n]) for n in columns} for r in data}


def _plain(value: Any) -> Any:
    return value.replace(tzinfo=None) if isinstance(value, dt.datetime) else value


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("same_batch", [True, False], ids=["same-batch", "earlier-batch"])
@pytest.mark.parametrize("form", list(FORMS))
def test_every_ddl_form_under_every_policy_leaves_the_sink_as_documented(tmp_path, form, policy, same_batch):
    spec = FORMS[form]
    p = Pipeline(tmp_path, BEFORE)
    p.job.schema_changes = policy
    p.snapshot(T, *SNAPSHOT)
    if spec.after is not None:
        p.alter(T, spec.after)  # the server has the statement's schema when the stream reads the changes before it
    p.tables.defaults = spec.defaults
    batches = _batches(spec, same_batch)
    for batch in batches[:-1]:
        p.batch(*batch)
    if policy == "fail":
        with pytest.raises(SchemaChangeRefused):
            p.batch(*batches[-1])
        before_rows = {r["id"]: dict(r) for r in SNAPSHOT} | {2: {"id": 2, "v": "b", "c": 22},
                                                              5: {"id": 5, "v": "e", "c": 5}}
        assert _sink(p) == (set(BEFORE.column_names), before_rows)  # nothing of the statement, its schema neither
        p.job.schema_changes = "evolve"  # the user's decision: a restarted stream runs the batch again
        p.applier = p.new_applier()
        p.next_batch -= 1
    p.batch(*batches[-1])
    columns, rows, drift = _expected(spec, policy)
    assert _sink(p) == (columns, rows)
    assert [kind for kind, _ in p.drift(T)] == drift
    assert all(offset == off(3) for _, offset in p.drift(T))
    p.applier = p.new_applier()  # a crash after the batch: a restarted stream replays it, and changes nothing
    p.batch(*batches[-1], batch_id=p.next_batch - 1)
    assert _sink(p) == (columns, rows)
