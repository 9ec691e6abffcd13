"""Shipping the project to Spark executors that do not have it installed (``--py-files``)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import airflow_provider_mysqlcdc

PACKAGE_DIR = Path(airflow_provider_mysqlcdc.__file__).resolve().parent
SPARK_JOBS_DIR = PACKAGE_DIR.parent / "spark_jobs"


def build_py_files_zip(destination: Path) -> Path:
    """Zip the package (sources only) for ``spark-submit --py-files``."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(PACKAGE_DIR.rglob("*.py")):
            archive.write(path, Path(PACKAGE_DIR.name) / path.relative_to(PACKAGE_DIR))
    return destination


def spark_job_script(name: str) -> Path:
    """Path of a program in ``spark_jobs/`` (e.g. ``snapshot_chunk.py``)."""
    path = SPARK_JOBS_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: spark_jobs/ must sit next to the package")
    return path
