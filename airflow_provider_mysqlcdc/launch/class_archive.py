"""The driver JVM's class-data archive: Spark's classes mapped from an archive at the JVM's start
instead of read, parsed and verified from Spark's jars by every program.

A program submitted in client mode spends most of its first seconds in its driver JVM loading
Spark's classes: the JVM's own start, the SparkContext (about 1.4 s) and the SQL session (about
1.7 s). With a dynamic class-data archive (``-XX:SharedArchiveFile``, JDK 13 and later) a small
program's spark-submit took 3.3-4.0 s instead of 5.8-6.9 s on this project's 2-core machine.

An archive fits one Java build and one Spark installation (its jars are the class path): it is kept
in the user's cache folder under a key of both (``archive_key``). While there is none, the first
launch that finds none starts building it in the background (``start_build``: a detached, low
priority process that runs spark/jobs/warm_up.py once with ``-XX:ArchiveClassesAtExit``, about 20 s)
and is submitted without it; the launches after the build use it. The JVM checks an archive
against its own build and class path and ignores one that does not fit (a target with jars of its
own, say), silently: a program never fails for it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: where the archives are kept, one per Java build and Spark installation
ARCHIVE_DIR = Path.home() / ".cache" / "airflow-provider-mysqlcdc" / "jvm"
#: a build that has not finished after this long is taken for dead, and started again
STALE_BUILD_S = 900.0
#: the JVM logs nothing about an archive it cannot use
QUIET_SHARING = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def java_binary() -> str | None:
    """The ``java`` spark-submit runs: ``JAVA_HOME``'s, else the first on the PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def archive_key(spark_home: Path, java: str) -> str:
    """What an archive fits: the Java binary (its real path, size and time) and Spark's jars (their
    folder, which is the class path, and their names and sizes)."""
    digest = hashlib.sha256()
    real = os.path.realpath(java)
    stat = os.stat(real)
    digest.update(f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0{os.path.realpath(spark_home)}\0".encode())
    jars = spark_home / "jars"
    for jar in sorted(jars.glob("*.jar")) if jars.is_dir() else ():
        digest.update(f"{jar.name}\0{jar.stat().st_size}\0".encode())
    return digest.hexdigest()[:32]


def archive_options(spark_home: Path, *, folder: Path = ARCHIVE_DIR) -> str:
    """The driver JVM's options that use the archive, or "" while there is none (its build is then
    started, unless one runs already) or no ``java`` is found."""
    java = java_binary()
    if java is None:
        return ""
    key = archive_key(spark_home, java)
    archive = folder / f"{key}.jsa"
    if archive.is_file():
        return f"-XX:SharedArchiveFile={archive} {QUIET_SHARING}"
    start_build(spark_home, archive)
    return ""


def start_build(spark_home: Path, archive: Path) -> bool:
    """Start building ``archive`` in a detached process, unless a build of it runs already; whether
    one was started."""
    try:
        archive.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        log.info("no class-data archive for the driver JVM: %s cannot be written (%s)", archive.parent, exc)
        return False
    lock = archive.with_suffix(".building")
    try:
        if time.time() - lock.stat().st_mtime > STALE_BUILD_S:
            lock.unlink(missing_ok=True)
    except FileNotFoundError:
        pass
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    command = [sys.executable, "-m", __name__, str(spark_home), str(archive)]
    nice = shutil.which("nice")
    try:
        with open(archive.with_suffix(".log"), "wb") as output:
            subprocess.Popen([nice, "-n", "10", *command] if nice else command, stdin=subprocess.DEVNULL,
                             stdout=output, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    except OSError:
        lock.unlink(missing_ok=True)
        raise
    log.info("building the driver JVM's class-data archive %s in the background (once, about 20 s): programs "
             "start faster once it is there", archive)
    return True


def build(spark_home: Path, archive: Path) -> int:
    """Run the warm-up program with the archive recorded at its exit; keep it only when complete."""
    from airflow_provider_mysqlcdc.launch.submit import program_environment
    from airflow_provider_mysqlcdc.spark.packaging import spark_job_script

    lock = archive.with_suffix(".building")
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    try:
        env = program_environment()
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        done = subprocess.run(
            [str(spark_home / "bin" / "spark-submit"), "--master", "local[1]",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=ERROR",
             "--conf", f"spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={partial} {QUIET_SHARING}",
             str(spark_job_script("warm_up.py"))], env=env, stdin=subprocess.DEVNULL, check=False)
        if done.returncode == 0 and partial.is_file() and partial.stat().st_size > 0:
            os.replace(partial, archive)
            return 0
        return done.returncode or 1
    finally:
        partial.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(build(Path(sys.argv[1]), Path(sys.argv[2])))
