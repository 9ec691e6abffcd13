"""Sample tables and random concurrent writers, for the invariant tests and the demo.

The tables cover the key shapes the algorithm must get right: an integer key, a composite key, a
string key under a case-insensitive collation (with names that need quoting), a BIGINT UNSIGNED
key near its maximum, and a DECIMAL key. Writers run random single- and multi-row transactions:
inserts, updates, key-changing updates and deletes, re-using deleted keys.
"""

from __future__ import annotations

import decimal
import logging
import random
import string
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql

from airflow_provider_mysqlcdc.cdc.model.schema import TableId, quote_identifier
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig

log = logging.getLogger(__name__)

UNSIGNED_MAX = 2**64 - 1


@dataclass(frozen=True)
class SampleTable:
    name: str
    ddl: str  # CREATE TABLE body, with {name} for the quoted table name
    new_key: Callable[[random.Random], tuple[Any, ...]]
    key_columns: tuple[str, ...]
    new_values: Callable[[random.Random], dict[str, Any]]


def _text(rng: random.Random, n: int = 12) -> str:
    alphabet = string.ascii_letters + "  éß😀"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))


def _name_key(rng: random.Random) -> tuple[Any, ...]:
    # Few letters, mixed case, trailing spaces: many collisions under utf8mb4_general_ci.
    core = "".join(rng.choice("abcXYZé") for _ in range(rng.randint(1, 4)))
    core = "".join(c.upper() if rng.random() < 0.3 else c for c in core)
    return (core + (" " if rng.random() < 0.1 else "") + str(rng.randint(0, 99)),)


SAMPLE_TABLES: tuple[SampleTable, ...] = (
    SampleTable(
        "orders",
        "CREATE TABLE {name} (id INT NOT NULL PRIMARY KEY, customer VARCHAR(40), amount DECIMAL(12,2), "
        "status ENUM('new','paid','shipped'), updated_at DATETIME(6)) ENGINE=InnoDB",
        lambda rng: (rng.randint(1, 3000),),
        ("id",),
        lambda rng: {"customer": _text(rng), "amount": decimal.Decimal(rng.randint(0, 10**6)) / 100,
                     "status": rng.choice(["new", "paid", "shipped"]), "updated_at": None},
    ),
    SampleTable(
        "line items",
        "CREATE TABLE {name} (order_id INT NOT NULL, line_no SMALLINT NOT NULL, qty INT, note TEXT, "
        "PRIMARY KEY (order_id, line_no)) ENGINE=InnoDB",
        lambda rng: (rng.randint(1, 400), rng.randint(1, 8)),
        ("order_id", "line_no"),
        lambda rng: {"qty": rng.randint(-5, 500), "note": _text(rng, 30)},
    ),
    SampleTable(
        "select",  # a reserved word
        "CREATE TABLE {name} (`näme-key` VARCHAR(40) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, "
        "score DOUBLE, flag BIT(1)) ENGINE=InnoDB",
        _name_key,
        ("näme-key",),
        lambda rng: {"score": rng.random() * 1000, "flag": rng.randint(0, 1)},
    ),
    SampleTable(
        "big_unsigned",
        "CREATE TABLE {name} (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, payload VARBINARY(32)) ENGINE=InnoDB",
        lambda rng: (UNSIGNED_MAX - rng.randint(0, 3000),),
        ("id",),
        lambda rng: {"payload": rng.randbytes(rng.randint(0, 32))},
    ),
    SampleTable(
        "prices",
        "CREATE TABLE {name} (sku DECIMAL(20,4) NOT NULL PRIMARY KEY, price DECIMAL(10,2), "
        "valid_from TIMESTAMP(3) NULL) ENGINE=InnoDB",
        lambda rng: (decimal.Decimal(rng.randint(0, 300000)) / 100,),
        ("sku",),
        lambda rng: {"price": decimal.Decimal(rng.randint(0, 10**6)) / 100, "valid_from": None},
    ),
)


def create_sample_tables(conn: pymysql.connections.Connection, database: str, rows_per_table: int,
                         seed: int = 0, tables: tuple[SampleTable, ...] = SAMPLE_TABLES,
                         charset: str | None = "utf8mb4") -> list[TableId]:
    """(Re)create the sample database and fill each table with about ``rows_per_table`` rows.
    ``charset``: the database's default character set (None: the server's)."""
    rng = random.Random(seed)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote_identifier(database)}")
        cur.execute(f"CREATE DATABASE {quote_identifier(database)}" + (f" CHARACTER SET {charset}" if charset else ""))
        for table in tables:
            table_id = TableId(database, table.name)
            cur.execute(table.ddl.format(name=table_id.quoted))
            for _ in range(rows_per_table):
                _insert(cur, table_id, table, rng, ignore=True)
    conn.commit()
    return [TableId(database, t.name) for t in tables]


def _insert(cur: Any, table_id: TableId, table: SampleTable, rng: random.Random, ignore: bool = False) -> int:
    row = dict(zip(table.key_columns, table.new_key(rng)))
    row.update(table.new_values(rng))
    columns = ", ".join(quote_identifier(c) for c in row)
    values = ", ".join("NOW(6)" if v is None and c.endswith(("_at", "_from")) else "%s" for c, v in row.items())
    args = [v for c, v in row.items() if not (v is None and c.endswith(("_at", "_from")))]
    verb = "INSERT IGNORE" if ignore else "INSERT"
    return cur.execute(f"{verb} INTO {table_id.quoted} ({columns}) VALUES ({values})", args)


def _key_condition(table: SampleTable, key: tuple[Any, ...]) -> tuple[str, list[Any]]:
    return " AND ".join(f"{quote_identifier(c)} = %s" for c in table.key_columns), list(key)


def _random_existing_key(cur: Any, table_id: TableId, table: SampleTable, rng: random.Random) -> tuple[Any, ...]:
    """A key near a random point, so updates and deletes mostly hit existing rows."""
    probe = table.new_key(rng)
    first = quote_identifier(table.key_columns[0])
    cols = ", ".join(quote_identifier(c) for c in table.key_columns)
    cur.execute(f"SELECT {cols} FROM {table_id.quoted} WHERE {first} >= %s ORDER BY {first} LIMIT 1", (probe[0],))
    row = cur.fetchone()
    return tuple(row) if row else probe


@dataclass
class WriterStats:
    transactions: int = 0
    statements: int = 0
    rows_changed: int = 0
    rolled_back: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def add(self, other: "WriterStats") -> None:
        self.transactions += other.transactions
        self.statements += other.statements
        self.rows_changed += other.rows_changed
        self.rolled_back += other.rolled_back
        for k, v in other.by_kind.items():
            self.by_kind[k] = self.by_kind.get(k, 0) + v


class RandomWriters:
    """Threads that write random transactions until stopped."""

    def __init__(self, source: SourceConfig, database: str, *, writers: int = 3, seed: int = 1,
                 tables: tuple[SampleTable, ...] = SAMPLE_TABLES, max_statements_per_txn: int = 5,
                 pause_s: float = 0.0, server_time_zone: bool = False):
        """``server_time_zone``: the writers' sessions take the server's default time zone, as an
        application's do (``NOW()``, TIMESTAMP literals), not UTC as the pipeline's own connections."""
        self.source = source
        self.server_time_zone = server_time_zone
        self.database = database
        self.tables = tables
        self.max_statements = max_statements_per_txn
        self.pause_s = pause_s
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(seed + i,), daemon=True, name=f"writer-{i}")
                         for i in range(writers)]
        self._stats: list[WriterStats] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()

    def __enter__(self) -> "RandomWriters":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> WriterStats:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        if self._errors:
            raise RuntimeError(f"a writer failed: {self._errors[0]!r}") from self._errors[0]
        total = WriterStats()
        for s in self._stats:
            total.add(s)
        return total

    def write(self, transactions: int, seed: int) -> WriterStats:
        """Run ``transactions`` random transactions on the calling thread (deterministic for a seed,
        except that keys collide with rows others changed meanwhile)."""
        rng, stats = random.Random(seed), WriterStats()
        conn = self._connect()
        try:
            for _ in range(transactions):
                self._transaction(conn, rng, stats)
        finally:
            conn.close()
        return stats

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        stats = WriterStats()
        try:
            conn = self._connect()
            try:
                while not self._stop.is_set():
                    self._transaction(conn, rng, stats)
                    if self.pause_s:
                        self._stop.wait(self.pause_s)
            finally:
                conn.close()
        except BaseException as exc:  # surfaced by stop()
            self._errors.append(exc)
        with self._lock:
            self._stats.append(stats)

    def _connect(self) -> pymysql.connections.Connection:
        conn = self.source.connect(autocommit=False)
        if self.server_time_zone:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = @@global.time_zone")
        return conn

    def _transaction(self, conn: pymysql.connections.Connection, rng: random.Random, stats: WriterStats) -> None:
        statements = 1 if rng.random() < 0.5 else rng.randint(2, self.max_statements)
        rows = 0
        kinds: list[str] = []
        try:
            with conn.cursor() as cur:
                for _ in range(statements):
                    table = rng.choice(self.tables)
                    kind = rng.choices(["insert", "update", "key_update", "delete", "multi_update"],
                                       weights=[4, 4, 2, 2, 1])[0]
                    rows += self._statement(cur, TableId(self.database, table.name), table, kind, rng)
                    kinds.append(kind)
            conn.commit()
        except (pymysql.err.IntegrityError, pymysql.err.OperationalError) as exc:
            # duplicate keys from key updates/inserts, deadlocks, lock waits: roll back and carry on
            if isinstance(exc, pymysql.err.OperationalError) and exc.args[0] not in (1205, 1213):
                raise
            conn.rollback()
            stats.rolled_back += 1
            return
        stats.transactions += 1
        stats.statements += statements
        stats.rows_changed += rows
        for k in kinds:
            stats.by_kind[k] = stats.by_kind.get(k, 0) + 1

    def _statement(self, cur: Any, table_id: TableId, table: SampleTable, kind: str, rng: random.Random) -> int:
        if kind == "insert":
            return _insert(cur, table_id, table, rng)
        key = _random_existing_key(cur, table_id, table, rng)
        where, args = _key_condition(table, key)
        if kind == "delete":
            return cur.execute(f"DELETE FROM {table_id.quoted} WHERE {where}", args)
        if kind == "key_update":
            new_key = table.new_key(rng)
            sets = ", ".join(f"{quote_identifier(c)} = %s" for c in table.key_columns)
            return cur.execute(f"UPDATE {table_id.quoted} SET {sets} WHERE {where}", list(new_key) + args)
        values = table.new_values(rng)
        sets = ", ".join(f"{quote_identifier(c)} = %s" for c, v in values.items() if v is not None)
        vals = [v for v in values.values() if v is not None]
        if kind == "multi_update":
            first = quote_identifier(table.key_columns[0])
            return cur.execute(
                f"UPDATE {table_id.quoted} SET {sets} WHERE {first} >= %s ORDER BY {first} LIMIT {rng.randint(2, 20)}",
                vals + [key[0]],
            )
        return cur.execute(f"UPDATE {table_id.quoted} SET {sets} WHERE {where}", vals + args)
