"""The report folder between a Spark program and its caller (spark/report.py), on a local path."""

from __future__ import annotations

import logging
import threading

from airflow_provider_mysqlcdc.protocol.results import DriverInfo, JobFailure
from airflow_provider_mysqlcdc.spark.report import DRIVER, JobReport, ReportWatcher

log = logging.getLogger("airflow_provider_mysqlcdc.spark.test_program")


def test_the_caller_reads_the_job_and_sees_each_log_line_once_in_order_then_the_result(tmp_path):
    watcher = ReportWatcher(str(tmp_path / "report"))
    watcher.write_job('{"table": "shop.orders"}')
    seen: list[str] = []
    with JobReport(watcher.folder, flush_interval_s=0.05) as report:
        assert report.read_job() == '{"table": "shop.orders"}'
        for number in range(50):
            log.info("split %d done", number)
            if number % 10 == 0:
                watcher.poll(seen.append)
        report.succeeded({"rows": 50})
    watcher.poll(seen.append)
    assert [line.rsplit(": ", 1)[1] for line in seen] == [f"split {n} done" for n in range(50)]
    assert watcher.result() == {"rows": 50} and watcher.failure() is None


def test_a_failure_is_reported_in_the_programs_own_words(tmp_path):
    with JobReport(str(tmp_path / "report")) as report:
        report.failed(ValueError("table shop.orders has no primary key"))
    watcher = ReportWatcher(str(tmp_path / "report"))
    assert watcher.failure() == JobFailure("ValueError", "table shop.orders has no primary key")
    assert watcher.result() is None


def test_the_driver_is_handed_over_once_and_following_stops_when_asked(tmp_path):
    watcher = ReportWatcher(str(tmp_path / "report"))
    driver = DriverInfo("app-1", "http://worker:4040", "worker", 4242)
    watcher.storage.write_record(driver, DRIVER)
    drivers: list[DriverInfo] = []
    stop = threading.Event()
    stop.set()  # follow() still polls once before returning
    watcher.follow(stop, lambda line: None, drivers.append)
    watcher.poll(lambda line: None, drivers.append)
    assert drivers == [driver]


def test_removing_the_folder_leaves_nothing(tmp_path):
    watcher = ReportWatcher(str(tmp_path / "report"))
    watcher.write_job("{}")
    watcher.remove()
    assert not (tmp_path / "report").exists()
    watcher.remove()  # and again: nothing to remove is fine
