"""The provider as users install it: a wheel pip-installed into a fresh virtualenv with no checkout
beside it (helpers.py ``install_wheel``). Its DAG runs from there in test_airflow_dag.py."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PROBE = """
import json
from airflow.providers_manager import ProvidersManager
import airflow_provider_mysqlcdc
from importlib.resources import files
from airflow_provider_mysqlcdc.spark.packaging import spark_job_script

manager = ProvidersManager()
print(json.dumps({
    "package": airflow_provider_mysqlcdc.__file__,
    "programs": [str(spark_job_script(n)) for n in ("snapshot_chunk.py", "binlog_stream.py")],
    "example_dag": str(files("airflow_provider_mysqlcdc.example_dags") / "mysqlcdc_example.py"),
    "provider": manager.providers["airflow-provider-mysqlcdc"].version,
    "hook": manager.hooks["mysqlcdc"].hook_class_name,
}))
"""


def test_the_wheel_installs_a_provider_that_registers_with_its_programs_and_example_dag(installed_wheel, tmp_path):
    proc = subprocess.run([str(installed_wheel.python), "-c", PROBE], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    venv = str(installed_wheel.python.parent.parent)
    assert all(p.startswith(venv) for p in [found["package"], *found["programs"], found["example_dag"]]), found
    assert found["provider"] == "0.1.0" and found["hook"].endswith("MySqlCdcHook")


#: what only tests and tooling may use: test frameworks and servers, a browser, and Airflow's
#: internals, which change without notice between minor releases (the provider uses ``airflow.sdk``,
#: the providers' public modules and the documented plugin and API-server interfaces)
TOOLING_ONLY = ("pytest", "moto", "fastapi.testclient", "airflow.models", "airflow.serialization",
                "airflow.utils.session", "airflow.dag_processing", "devtools", "tests", "bench")


def _imported_modules(tree: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """Every import of a module's source (at any depth): the module and the names taken from it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [alias.name for alias in node.names]


def _tooling_imports(source: str) -> list[str]:
    found = []
    for module, names in _imported_modules(ast.parse(source)):
        if any(module == bad or module.startswith(bad + ".") for bad in TOOLING_ONLY):
            found.append(module)
        elif module.startswith("airflow.sdk.definitions") or module.startswith("airflow.sdk.execution_time"):
            found += [f"{module}.{name}" for name in names if name.startswith("_")]
    if re.search(r"\bchromium\b", source, re.IGNORECASE):
        found.append("chromium")
    return found


def test_the_wheel_holds_no_test_tooling_and_no_airflow_internals(installed_wheel):
    with zipfile.ZipFile(installed_wheel.wheel) as wheel:
        modules = {name: wheel.read(name).decode() for name in wheel.namelist() if name.endswith(".py")}
    assert modules and all(name.startswith("airflow_provider_mysqlcdc/") for name in modules), sorted(modules)
    offending = {name: found for name, source in modules.items() if (found := _tooling_imports(source))}
    assert offending == {}


def test_the_tooling_check_finds_what_the_test_tooling_imports():
    """The check above is not blind: the checkout's own tooling trips it (a server launcher, the DAG
    runner, the browser driver)."""
    tooling = Path(__file__).resolve().parents[2] / "devtools"
    found = {name: _tooling_imports((tooling / name).read_text())
             for name in ("dag_runner.py", "browser.py", "throwaway_server.py")}
    assert "airflow.models.xcom" in found["dag_runner.py"]
    assert "fastapi.testclient" in found["dag_runner.py"]
    assert "airflow.sdk.definitions.dag._run_task" in found["dag_runner.py"]
    assert "chromium" in found["browser.py"]
    assert "devtools.tls" in found["throwaway_server.py"]
