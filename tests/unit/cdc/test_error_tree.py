"""One error tree (cdc/errors.py): every exception class the package defines is there, under ``CdcError``."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_provider_mysqlcdc
from airflow_provider_mysqlcdc.cdc import errors

PACKAGE = Path(airflow_provider_mysqlcdc.__file__).parent


def _defined_exceptions(source: str) -> list[str]:
    """Classes whose bases name an error or exception type (``...Error``, ``Exception``, or one of ours)."""
    ours = {name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, Exception)}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
            if any(b.endswith(("Error", "Exception", "Failed", "Failures")) or b in ours for b in bases):
                found.append(node.name)
    return found


def test_every_exception_class_of_the_package_is_defined_in_the_error_module():
    assert len(list(PACKAGE.rglob("*.py"))) > 50  # the package itself, not an empty folder
    elsewhere = {str(module.relative_to(PACKAGE)): names for module in PACKAGE.rglob("*.py")
                 if module.name != "errors.py" and (names := _defined_exceptions(module.read_text()))}
    assert elsewhere == {}


def test_every_error_of_the_error_module_is_a_cdc_error():
    defined = [value for value in vars(errors).values()
               if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == errors.__name__]
    assert len(defined) >= 15
    assert [e.__name__ for e in defined if not issubclass(e, errors.CdcError)] == []


def test_the_check_finds_an_exception_class_defined_elsewhere():
    assert _defined_exceptions("class Boom(RuntimeError):\n    pass\nclass Later(LeaseLost):\n    pass\n"
                               "class Fine:\n    pass\n") == ["Boom", "Later"]
