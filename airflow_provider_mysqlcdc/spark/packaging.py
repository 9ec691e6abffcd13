"""Shipping the project to Spark executors that do not have it installed (``--py-files``)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import py_compile
import shutil
import sys
import tempfile
import zipfile
from importlib.resources import files
from pathlib import Path

import airflow_provider_mysqlcdc

PACKAGE_DIR = Path(airflow_provider_mysqlcdc.__file__).resolve().parent


#: where the zips of ``build_py_files_zip`` are kept, one per package content and interpreter
CACHE_DIR = Path.home() / ".cache" / "airflow-provider-mysqlcdc" / "py-files"


def build_py_files_zip(destination: Path) -> Path:
    """Zip the package for ``spark-submit --py-files`` (and a Spark Connect session's artifacts): its
    sources and their bytecode for this interpreter, checked against the sources by hash. Python
    imports a zip's modules from their ``.pyc`` beside the source where the bytecode fits (a Python of
    another version takes the sources): each Python process of a Spark program (its driver, the
    stream's read process, the executors' workers) then imports the package in about 0.6 s instead of
    0.9 s. Compiling takes about 0.5 s, so the zip is built once per package content and interpreter
    in the user's cache folder (``CACHE_DIR``) and copied from there."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    sources = sorted(PACKAGE_DIR.rglob("*.py"))
    key = hashlib.sha256(importlib.util.MAGIC_NUMBER + sys.version.encode())
    for path in sources:
        key.update(str(path.relative_to(PACKAGE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    cached = CACHE_DIR / f"{key.hexdigest()[:32]}.zip"
    if not cached.is_file():
        try:
            CACHE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle, building = tempfile.mkstemp(dir=CACHE_DIR, suffix=".building")
            os.close(handle)
        except OSError:  # no cache folder to write: built for this program alone
            _write_zip(sources, destination)
            return destination
        try:
            _write_zip(sources, Path(building))
            os.replace(building, cached)  # whole or not at all, whoever builds it at the same time
        finally:
            if os.path.exists(building):
                os.unlink(building)
    shutil.copyfile(cached, destination)
    return destination


def _write_zip(sources: list[Path], destination: Path) -> None:
    with tempfile.TemporaryDirectory() as compiled, zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sources:
            name = str(Path(PACKAGE_DIR.name) / path.relative_to(PACKAGE_DIR))
            archive.write(path, name)
            bytecode = os.path.join(compiled, "module.pyc")
            py_compile.compile(str(path), cfile=bytecode, dfile=name, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
            archive.write(bytecode, name + "c")


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
