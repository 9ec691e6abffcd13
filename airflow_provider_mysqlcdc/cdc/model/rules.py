"""Which columns and rows of one captured table reach the sink, and in what form: a ``TableRule``.

A rule keeps every column (``include`` unset) or only those ``include`` names (and the row key,
which cdc/source/rules.py always keeps), less those ``exclude`` names; of the kept columns it may
replace the value of some by a keyed hash (``hash``), cut it to its first n characters or bytes
(``truncate``), or NULL (``null``). Names are compared without case, as MySQL compares column
names. The rule is by name, not by position: a column a DDL adds later is kept or not, masked or
not, by the same rule. ``where``: a row filter (cdc/records/row_filter.py); only the rows it keeps
reach the sink. ``route``: the table is one shard of a sink table that several source tables write
into (sinks/routing.py), instead of a sink table of its own.

Plain data (it travels in plans, job files and the registry); cdc/source/rules.py reads rules
from a pipeline's settings and applies them to a schema, cdc/records/table_rows.py to rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Route:
    """The sink table a shard writes into (``database``, ``table``: the sink's names, not a source
    table's), and whether the shards' row keys are unique across them all (``global_key``) or only
    within each shard, so that the shard's source names join the key."""

    database: str
    table: str
    #: declared by the user for readers of the table (docs, lineage); the table is written alike
    #: either way (each shard's rows apart), so changing it re-snapshots nothing
    global_key: bool = field(default=False, compare=False)
    #: the sink table's type of each column (lower-case name) that the shard's own type widens into,
    #: as sinks/arrow_rows.py names it (``int64``, ``double``, ``decimal128(12, 4)``): chosen by the
    #: plan from every shard's (sinks/routing.py), never set by the user. No change of rule: the
    #: table's types stay, and a DDL that changes the shard's own type within them (INT to BIGINT
    #: where the table has BIGINT) needs no re-snapshot
    column_types: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "column_types", tuple(sorted((n.lower(), t) for n, t in self.column_types)))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"database": self.database, "table": self.table, "global_key": self.global_key}
        if self.column_types:
            data["column_types"] = dict(self.column_types)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Route":
        return cls(data["database"], data["table"], bool(data.get("global_key", False)),
                   tuple(data.get("column_types", {}).items()))

    def __str__(self) -> str:
        return f"{self.database}.{self.table}" + (" (key unique across shards)" if self.global_key else "")


@dataclass(frozen=True)
class TableRule:
    include: tuple[str, ...] | None = None  # None: every column
    exclude: tuple[str, ...] = ()
    hash: tuple[str, ...] = ()
    truncate: tuple[tuple[str, int], ...] = ()
    null: tuple[str, ...] = ()
    #: the row filter's text (None: every row)
    where: str | None = None
    #: the sink table this table is a shard of (None: a sink table of its own)
    route: Route | None = None

    def __post_init__(self) -> None:
        for name in ("exclude", "hash", "null"):
            object.__setattr__(self, name, tuple(sorted(n.lower() for n in getattr(self, name))))
        if self.include is not None:
            object.__setattr__(self, "include", tuple(sorted(n.lower() for n in self.include)))
        object.__setattr__(self, "truncate", tuple(sorted((n.lower(), int(k)) for n, k in self.truncate)))

    def keeps(self, name: str) -> bool:
        lowered = name.lower()
        return (self.include is None or lowered in self.include) and lowered not in self.exclude

    def mask_of(self, name: str) -> str | None:
        """``hash``, ``truncate:<n>``, ``null``, or None for a column kept as it is (or not kept)."""
        lowered = name.lower()
        if lowered in self.hash:
            return "hash"
        if lowered in self.null:
            return "null"
        length = dict(self.truncate).get(lowered)
        return None if length is None else f"truncate:{length}"

    @property
    def masked(self) -> tuple[str, ...]:
        """Every column name a mask names."""
        return self.hash + self.null + tuple(n for n, _ in self.truncate)

    @property
    def named(self) -> tuple[str, ...]:
        """Every column name the rule names."""
        return (self.include or ()) + self.exclude + self.masked

    @property
    def hashes(self) -> bool:
        return bool(self.hash)

    @property
    def acts_on_rows(self) -> bool:
        """Whether the rule changes or filters rows (else it only routes them)."""
        return self.masks_or_leaves_out or self.where is not None

    @property
    def masks_or_leaves_out(self) -> bool:
        """Whether the rule does anything to the columns (else it only filters rows)."""
        return self.include is not None or bool(self.exclude or self.masked)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"exclude": list(self.exclude), "hash": list(self.hash),
                                "truncate": {n: k for n, k in self.truncate}, "null": list(self.null)}
        if self.include is not None:
            data["include"] = list(self.include)
        if self.where is not None:
            data["where"] = self.where
        if self.route is not None:
            data["route"] = self.route.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TableRule":
        include = data.get("include")
        return cls(None if include is None else tuple(include), tuple(data.get("exclude", ())),
                   tuple(data.get("hash", ())), tuple((n, int(k)) for n, k in data.get("truncate", {}).items()),
                   tuple(data.get("null", ())), data.get("where"),
                   None if data.get("route") is None else Route.from_dict(data["route"]))

    def __str__(self) -> str:
        parts = []
        if self.include is not None:
            parts.append("include " + ", ".join(self.include))
        for word, names in (("exclude", self.exclude), ("hash", self.hash), ("null", self.null)):
            if names:
                parts.append(f"{word} " + ", ".join(names))
        if self.truncate:
            parts.append("truncate " + ", ".join(f"{n} to {k}" for n, k in self.truncate))
        if self.where is not None:
            parts.append(f"rows where {self.where}")
        if self.route is not None:
            parts.append(f"into {self.route}")
        return "; ".join(parts) or "every column as it is"


def route_of(rule: TableRule | None) -> Route | None:
    """The sink table a table with ``rule`` is a shard of (None: a sink table of its own)."""
    return None if rule is None else rule.route


def rule_from(data: dict[str, Any] | None) -> TableRule | None:
    """The rule a record holds (None: every column as it is)."""
    return None if data is None else TableRule.from_dict(data)


def rule_to(rule: TableRule | None) -> dict[str, Any] | None:
    return None if rule is None else rule.to_dict()
