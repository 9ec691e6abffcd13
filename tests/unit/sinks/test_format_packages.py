"""Each table format's sub-package stands alone: one format's sink imports without the other
format's library installed, so a lake of one format needs only its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

#: run in a fresh interpreter: the named library cannot be imported there, as if not installed
_WITHOUT = textwrap.dedent("""
    import importlib.abc, sys
    missing = sys.argv[1]

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == missing or name.startswith(missing + "."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    import importlib
    module = importlib.import_module(sys.argv[2])
    print(getattr(module, sys.argv[3]).__name__)
    assert not any(m == missing or m.startswith(missing + ".") for m in sys.modules), missing
""")


@pytest.mark.parametrize("missing, module, name", [
    ("deltalake", "airflow_provider_mysqlcdc.sinks.iceberg.sink", "IcebergSink"),
    ("deltalake", "airflow_provider_mysqlcdc.sinks.iceberg.maintenance", "maintain_table"),
    ("pyiceberg", "airflow_provider_mysqlcdc.sinks.delta.sink", "DeltaSink"),
    ("pyiceberg", "airflow_provider_mysqlcdc.sinks.delta.maintenance", "maintain_table"),
])
def test_a_formats_sink_imports_without_the_other_formats_library(missing, module, name):
    done = subprocess.run([sys.executable, "-c", _WITHOUT, missing, module, name], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == name


def test_the_blocker_does_refuse_the_library_it_names():
    """The check above can fail: with the format's own library blocked, its sink does not import."""
    done = subprocess.run([sys.executable, "-c", _WITHOUT, "deltalake", "airflow_provider_mysqlcdc.sinks.delta.sink",
                           "DeltaSink"], capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'deltalake'" in done.stderr
