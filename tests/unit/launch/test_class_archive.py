"""The driver JVM's class-data archive (launch/class_archive.py): which archive fits, when its build
starts, and what a build keeps. The JVM's own use of the archive is measured in bench/ (stream-startup)."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.launch import class_archive
from airflow_provider_mysqlcdc.launch.class_archive import archive_key, archive_options, build, start_build


def _spark_home(tmp_path: Path, jars: dict[str, int]) -> Path:
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True, exist_ok=True)
    for name, size in jars.items():
        (home / "jars" / name).write_bytes(b"x" * size)
    return home


def _java(tmp_path: Path) -> str:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True, exist_ok=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    return str(java)


def test_an_archive_fits_one_spark_installation_and_one_java(tmp_path):
    java = _java(tmp_path)
    home = _spark_home(tmp_path, {"spark-core.jar": 10})
    first = archive_key(home, java)
    assert archive_key(home, java) == first
    (home / "jars" / "extra.jar").write_bytes(b"y")
    second = archive_key(home, java)
    assert second != first
    os.utime(java, (time.time() - 100, time.time() - 100))  # another Java build at the same path
    third = archive_key(home, java)
    assert third not in (first, second)
    elsewhere = tmp_path / "other" / "spark"
    shutil.copytree(home, elsewhere)  # the same jars in another installation: another class path
    assert archive_key(elsewhere, java) != third


def test_an_archive_that_is_there_is_used_quietly(tmp_path, monkeypatch):
    java = _java(tmp_path)
    monkeypatch.setattr(class_archive, "java_binary", lambda: java)
    home = _spark_home(tmp_path, {"spark-core.jar": 10})
    archive = tmp_path / "jvm" / f"{archive_key(home, java)}.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"archive")
    options = archive_options(home, folder=tmp_path / "jvm")
    assert options.startswith(f"-XX:SharedArchiveFile={archive} ") and "-Xlog:cds=off" in options


def test_no_archive_starts_one_build_and_submits_without_it(tmp_path, monkeypatch):
    java = _java(tmp_path)
    monkeypatch.setattr(class_archive, "java_binary", lambda: java)
    started = []
    monkeypatch.setattr(class_archive, "start_build", lambda home, archive: started.append(archive) or True)
    home = _spark_home(tmp_path, {"spark-core.jar": 10})
    assert archive_options(home, folder=tmp_path / "jvm") == ""
    assert started == [tmp_path / "jvm" / f"{archive_key(home, java)}.jsa"]


def test_a_build_under_way_is_not_started_again_unless_it_went_stale(tmp_path, monkeypatch):
    archive = tmp_path / "jvm" / "k.jsa"
    archive.parent.mkdir()
    lock = archive.with_suffix(".building")
    lock.write_text("")
    assert start_build(tmp_path / "spark", archive) is False
    spawned = []
    monkeypatch.setattr(class_archive.subprocess, "Popen", lambda command, **kw: spawned.append(command))
    old = time.time() - class_archive.STALE_BUILD_S - 60
    os.utime(lock, (old, old))
    assert start_build(tmp_path / "spark", archive) is True
    assert spawned and spawned[0][-2:] == [str(tmp_path / "spark"), str(archive)]
    assert lock.exists()  # the build's own, until it ends


def _fake_spark_submit(home: Path, body: str) -> None:
    """A spark-submit that stands in for Spark's: the build's bookkeeping is what is checked here."""
    script = home / "bin" / "spark-submit"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!{sys.executable}\nimport re, sys\n"
                      "archive = re.search(r'ArchiveClassesAtExit=(\\S+)', ' '.join(sys.argv)).group(1)\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("body, kept", [("open(archive, 'wb').write(b'classes')\n", True),
                                        ("open(archive, 'wb').write(b'half')\nsys.exit(1)\n", False),
                                        ("sys.exit(0)\n", False)])
def test_a_build_keeps_only_a_complete_archive_and_always_ends_its_lock(tmp_path, body, kept):
    home = tmp_path / "spark"
    _fake_spark_submit(home, body)
    archive = tmp_path / "jvm" / "k.jsa"
    archive.parent.mkdir()
    archive.with_suffix(".building").write_text("")
    assert (build(home, archive) == 0) is kept
    assert archive.is_file() is kept and (not kept or archive.read_bytes() == b"classes")
    assert not archive.with_suffix(".building").exists()
    assert list(archive.parent.glob("*.partial")) == []
