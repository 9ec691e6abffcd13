"""The package's import graph: every import goes down the floors of docs/layout.md, never up.

Each module's imports of the package (lazy ones inside functions included) are read from its source,
so a module that imports upward, or a CDC-core module that imports Airflow or Spark, fails here
before anyone has to find the cycle at run time.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

import airflow_provider_mysqlcdc

PACKAGE = Path(airflow_provider_mysqlcdc.__file__).parent
ROOT = "airflow_provider_mysqlcdc"

#: the package's rooms, lowest floor first; a module imports only from its own floor or one below it
FLOORS: tuple[tuple[str, ...], ...] = (
    ("cdc", "cdc.errors", "cdc.model"),
    ("cdc.records",),
    ("cdc.source",),
    ("cdc.binlog", "cdc.planning"),
    ("cdc.reading",),
    ("protocol",),
    ("sinks",),
    ("state",),
    ("planning", "stream"),
    ("spark",),
    ("launch",),
    ("hooks", "assets", "metrics", "lineage", "links", "status"),
    ("triggers",),
    ("operators",),
    ("pipeline", "plugins", "example_dags", "get_provider_info"),
)

#: rooms that Spark executors (or the stream's rules, tested without a cluster) import: no Airflow, no Spark
FRAMEWORK_FREE = ("cdc", "protocol", "sinks", "state", "stream")


def _module_name(path: Path) -> str:
    parts = (ROOT, *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, set[str]]:
    """Every module of the package and the modules it imports (absolute names)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    imported.add(f"{base}.{node.module}" if node.module else base)
                elif node.module:
                    imported.add(node.module)
        graph[name] = imported
    return graph


def _room(module: str) -> str | None:
    """The room (a key of FLOORS) a module of the package lives in; None for the package itself."""
    rest = module.removeprefix(ROOT).lstrip(".")
    rooms = sorted((room for floor in FLOORS for room in floor), key=len, reverse=True)  # cdc.model before cdc
    return next((room for room in rooms if rest == room or rest.startswith(room + ".")), rest or None)


def _floor(room: str) -> int:
    return next(level for level, rooms in enumerate(FLOORS) if room in rooms)


def test_every_module_of_the_package_lives_in_a_room_of_the_floors():
    assert len(_modules()) > 100  # the package itself, not an empty folder
    homeless = {module for module in _modules() if module != ROOT and _room(module) not in
                {room for floor in FLOORS for room in floor}}
    assert homeless == set()


def test_no_module_imports_from_a_room_on_a_higher_floor():
    upward = {}
    for module, imported in _modules().items():
        if module == ROOT:
            continue
        here = _floor(_room(module))
        for target in imported:
            if target == ROOT or not target.startswith(ROOT + "."):
                continue  # the package's version, or another library
            if _floor(_room(target)) > here:
                upward.setdefault(module, set()).add(target)
    assert upward == {}


@pytest.mark.parametrize("lower, upper", [
    ("cdc.model", "cdc.source"), ("cdc.model", "cdc.binlog"),
    ("cdc.records", "cdc.source"), ("cdc.records", "cdc.binlog"),
    ("cdc.source", "cdc.binlog"),
])
def test_a_lower_cdc_room_does_not_import_a_higher_one(lower, upper):
    prefix = f"{ROOT}.{upper}"
    offenders = {module: sorted(t for t in imported if t == prefix or t.startswith(prefix + "."))
                 for module, imported in _modules().items() if _room(module) == lower}
    assert {module: found for module, found in offenders.items() if found} == {}


def test_the_cdc_core_imports_nothing_of_the_package_outside_it():
    outside = {module: sorted(t for t in imported if t.startswith(ROOT + ".") and not t.startswith(f"{ROOT}.cdc"))
               for module, imported in _modules().items() if module.startswith(f"{ROOT}.cdc")}
    assert {module: found for module, found in outside.items() if found} == {}


def test_framework_free_rooms_import_neither_airflow_nor_spark():
    framework = {}
    for module, imported in _modules().items():
        if (_room(module) or "").split(".")[0] not in FRAMEWORK_FREE:
            continue
        found = sorted(t for t in imported if t.split(".")[0] in ("airflow", "pyspark"))
        if found:
            framework[module] = found
    assert framework == {}
