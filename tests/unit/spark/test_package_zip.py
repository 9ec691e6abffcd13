"""The package zip Spark's Python processes import the package from (spark/packaging.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile

from airflow_provider_mysqlcdc.spark import packaging
from airflow_provider_mysqlcdc.spark.packaging import PACKAGE_DIR, build_py_files_zip

#: a module of the zip, imported: from its bytecode its code names the file as compiled (the name in
#: the zip), from its source by its path in the zip
_IMPORT = ("import airflow_provider_mysqlcdc.spark.starting as m; assert '.zip' in m.__file__, m.__file__; "
           "print(m.SparkStart.begin.__code__.co_filename)")
BYTECODE, SOURCE = "airflow_provider_mysqlcdc/spark/starting.py", ".zip/airflow_provider_mysqlcdc/spark/starting.py"


def _imports_from(zip_path) -> str:
    """Where a Python importing from ``zip_path`` took the module from: ``BYTECODE`` or ``SOURCE``."""
    done = subprocess.run([sys.executable, "-c", _IMPORT], env={"PYTHONPATH": str(zip_path), "PATH": ""},
                          capture_output=True, text=True, check=True, cwd="/")
    filename = done.stdout.strip()
    return BYTECODE if filename == BYTECODE else SOURCE if filename.endswith(SOURCE) else filename


def test_the_zip_holds_each_module_with_bytecode_checked_against_its_source(tmp_path, monkeypatch):
    monkeypatch.setattr(packaging, "CACHE_DIR", tmp_path / "cache")
    built = build_py_files_zip(tmp_path / "a.zip")
    names = set(zipfile.ZipFile(built).namelist())
    sources = {f"airflow_provider_mysqlcdc/{p.relative_to(PACKAGE_DIR)}" for p in PACKAGE_DIR.rglob("*.py")}
    assert sources <= names and {f"{s}c" for s in sources} <= names
    header = zipfile.ZipFile(built).read("airflow_provider_mysqlcdc/spark/starting.pyc")[:8]
    assert header[:4] == importlib.util.MAGIC_NUMBER and int.from_bytes(header[4:8], "little") == 0b11  # checked hash
    assert _imports_from(built) == BYTECODE


def test_a_python_the_bytecode_does_not_fit_imports_the_sources(tmp_path, monkeypatch):
    monkeypatch.setattr(packaging, "CACHE_DIR", tmp_path / "cache")
    built = build_py_files_zip(tmp_path / "a.zip")
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(built) as source, zipfile.ZipFile(other, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            target.writestr(item, b"\0\0\r\n" + data[4:] if item.filename.endswith(".pyc") else data)
    assert _imports_from(other) == SOURCE


def test_the_zip_is_built_once_per_package_content_and_copied(tmp_path, monkeypatch):
    monkeypatch.setattr(packaging, "CACHE_DIR", tmp_path / "cache")
    first = build_py_files_zip(tmp_path / "one" / "a.zip")
    cached = list((tmp_path / "cache").iterdir())
    second = build_py_files_zip(tmp_path / "two" / "a.zip")
    assert list((tmp_path / "cache").iterdir()) == cached and len(cached) == 1
    assert first.read_bytes() == second.read_bytes() == cached[0].read_bytes()


def test_without_a_cache_folder_to_write_the_zip_is_built_in_place(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setattr(packaging, "CACHE_DIR", blocked / "cache")
    assert _imports_from(build_py_files_zip(tmp_path / "a.zip")) == BYTECODE
