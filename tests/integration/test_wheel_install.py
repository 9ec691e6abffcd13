"""The provider as users install it: a wheel pip-installed into a fresh virtualenv with no checkout
beside it (helpers.py ``install_wheel``). Its DAG runs from there in test_airflow_dag.py."""

from __future__ import annotations

import json
import subprocess

import pytest

pytestmark = pytest.mark.integration

PROBE = """
import json
from airflow.providers_manager import ProvidersManager
import airflow_provider_mysqlcdc
from airflow_provider_mysqlcdc.devtools.dag_runner import EXAMPLE_DAGS
from airflow_provider_mysqlcdc.spark.packaging import spark_job_script

manager = ProvidersManager()
print(json.dumps({
    "package": airflow_provider_mysqlcdc.__file__,
    "programs": [str(spark_job_script(n)) for n in ("snapshot_chunk.py", "binlog_stream.py")],
    "example_dag": str(EXAMPLE_DAGS / "mysqlcdc_example.py"),
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
