"""The package users adopt: its public names (``airflow_provider_mysqlcdc.__all__``, lazily imported so
that Spark executors need no Airflow), the page that lists them (docs/api.md), and the metadata a
release carries (requires-python, LICENSE, CHANGELOG.md)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import airflow_provider_mysqlcdc as package

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _api_page_names() -> list[str]:
    """The names docs/api.md lists: each is a bullet that starts with the name in backticks."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    return re.findall(r"^- `([A-Za-z_][A-Za-z0-9_]*)`:", text, flags=re.MULTILINE)


# --- the names ---------------------------------------------------------------------------------------

def test_every_exported_name_is_the_object_of_the_module_that_defines_it():
    for name in package.__all__:
        value = getattr(package, name)
        home = importlib.import_module(value.__module__)
        assert value.__module__.startswith("airflow_provider_mysqlcdc."), name
        assert getattr(home, name) is value, name


def test_every_name_imported_on_first_use_is_exported():
    assert sorted(set(package._LAZY) - set(package.__all__)) == []


def test_no_name_is_exported_twice():
    assert len(package.__all__) == len(set(package.__all__))


def test_dir_of_the_package_lists_every_exported_name():
    assert set(package.__all__) <= set(dir(package))


def test_a_name_the_package_does_not_export_raises_attribute_error():
    with pytest.raises(AttributeError, match="MySqlCdcNoSuchOperator"):
        package.MySqlCdcNoSuchOperator  # noqa: B018


def test_a_submodule_is_still_importable_from_the_package():
    from airflow_provider_mysqlcdc import pipeline

    assert pipeline.mysqlcdc_pipeline is package.mysqlcdc_pipeline


def test_every_error_of_the_tree_is_a_cdc_error():
    errors = [getattr(package, name) for name in package.__all__ if name.endswith(("Error", "Failures"))]
    assert errors and all(issubclass(error, package.CdcError) for error in errors)


def test_importing_the_package_and_its_errors_imports_neither_airflow_nor_pyspark():
    program = ("import sys, airflow_provider_mysqlcdc, airflow_provider_mysqlcdc.cdc.errors\n"
               "print(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'pyspark'}))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]", done.stderr


# --- docs/api.md ---------------------------------------------------------------------------------------

def test_the_api_page_lists_every_exported_name():
    assert sorted(set(package.__all__) - set(_api_page_names())) == []


def test_the_api_page_lists_nothing_the_package_does_not_export():
    assert sorted(set(_api_page_names()) - set(package.__all__)) == []


# --- what a release carries --------------------------------------------------------------------------------

def test_requires_python_is_3_11_or_later():
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"


def test_the_package_needs_python_3_11_because_it_uses_str_enum():
    """What makes 3.11 the lower bound: ``enum.StrEnum`` is new in Python 3.11."""
    sources = (path.read_text(encoding="utf-8") for path in (ROOT / "airflow_provider_mysqlcdc").rglob("*.py"))
    assert any("StrEnum" in source for source in sources)


def test_ruff_targets_the_lowest_python_the_package_supports():
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py311"


def test_the_license_file_is_the_apache_license_2_0():
    lines = [line.strip() for line in (ROOT / "LICENSE").read_text(encoding="utf-8").strip().splitlines()[:2]]
    assert lines == ["Apache License", "Version 2.0, January 2004"]


def test_the_package_metadata_names_the_apache_license_2_0():
    assert PYPROJECT["project"]["license"] == {"text": "Apache-2.0"}


def test_the_changelog_has_a_section_for_the_packages_version():
    assert f"\n## [{package.__version__}]" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_packages_version_is_the_projects():
    assert PYPROJECT["project"]["version"] == package.__version__
