"""Shipping the project to Spark executors that do not have it installed (``--py-files``)."""

from __future__ import annotations

import zipfile
from importlib.resources import files
from pathlib import Path

import airflow_provider_mysqlcdc

PACKAGE_DIR = Path(airflow_provider_mysqlcdc.__file__).resolve().parent


def build_py_files_zip(destination: Path) -> Path:
    """Zip the package (sources only) for ``spark-submit --py-files``."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(PACKAGE_DIR.rglob("*.py")):
            archive.write(path, Path(PACKAGE_DIR.name) / path.relative_to(PACKAGE_DIR))
    return destination


def spark_job_script(name: str) -> Path:
    """Path of a spark-submit program of the package (``spark/jobs/``, e.g. ``snapshot_chunk.py``):
    a file of the installed package, wheel or checkout alike."""
    path = Path(str(files("airflow_provider_mysqlcdc.spark.jobs").joinpath(name)))
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the installed airflow-provider-mysqlcdc has no program {name!r}")
    return path


def launcher_jar(destination: Path) -> Path:
    """An empty jar: the application resource when Spark's ``PythonRunner`` is the driver's main class
    (a standalone cluster runs a Python program only that way; launch/submit.py)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(destination, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    return destination
