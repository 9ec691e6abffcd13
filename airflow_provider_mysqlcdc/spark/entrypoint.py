"""What every program in ``spark/jobs/`` does around its work: arguments, logging, the Spark
session, and reporting the result or the failure.

With ``--report-to`` (what the operators and ``launch/submit.py`` pass) the job, its log lines, its
driver's address and its result travel through that report folder (spark/report.py), so the driver
may run on the cluster. Without it (a person running a program by hand) the log goes to stderr and
the result is printed on stdout.

With ``--spark-connect`` the program is the client of a Spark Connect session (a detached stream
started by launch/connect_runner.py): a plain Python process, no spark-submit. Its session's URL is in
the private credentials file, and ``prepare`` is given the source's settings and the object store's
credentials to carry to the server's Python workers (spark/connect.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

#: prepare(job JSON, source=None, server_file=None) -> (Spark application name, work(spark) -> result), where
#: ``spark`` is the program's Spark side while it starts (spark/starting.py ``SparkStart``);
#: ``source`` and ``server_file`` are given on a Spark Connect session (see the module doc)
Prepare = Callable[..., tuple[str, Callable[[Any], dict[str, Any]]]]


def job_main(argv: list[str] | None, *, description: str, prepare: Prepare) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--job", help="path or URL of the job's JSON file (it holds no secret); "
                                      "default: job.json in the report folder")
    parser.add_argument("--report-to", help="report folder (path or URL) for the log, the driver and the result")
    parser.add_argument("--source-file", help="path of the private file with the source's credentials "
                                              "(default: the MYSQLCDC_SOURCE_FILE environment variable)")
    parser.add_argument("--remove-source-folder", action="store_true",
                        help="remove the folder of --source-file when the program ends (a detached program "
                             "outlives the task that wrote it)")
    parser.add_argument("--spark-connect", action="store_true",
                        help="run as the client of a Spark Connect session, whose URL is in --source-file")
    args = parser.parse_args(argv)
    if not args.job and not args.report_to:
        parser.error("give --job, --report-to, or both")
    if args.spark_connect and not args.source_file:
        parser.error("--spark-connect needs --source-file (the file holds the session's URL)")

    from airflow_provider_mysqlcdc.cdc.source.connection import ENV_PREFIX
    from airflow_provider_mysqlcdc.spark.report import LOG_FORMAT, JobReport
    from airflow_provider_mysqlcdc.state.credentials import install_from_private_file

    if args.source_file:  # executors started from this process, and the job's own code, read it there
        os.environ[f"{ENV_PREFIX}FILE"] = args.source_file
    # the lake's and the state location's credentials on an object store, before anything touches them
    install_from_private_file(args.source_file)
    report = JobReport(args.report_to) if args.report_to else None
    # force: pyspark may have configured logging already. With a report folder our INFO lines go
    # there (the caller shows them); stderr keeps warnings and errors for the driver's own log.
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr, force=True)
    if report:
        logging.getLogger().handlers[0].setLevel(logging.WARNING)

    try:
        return _run(args, report, prepare)
    finally:
        if args.remove_source_folder and args.source_file:
            shutil.rmtree(os.path.dirname(os.path.abspath(args.source_file)), ignore_errors=True)


def _run(args: argparse.Namespace, report: Any, prepare: Prepare) -> int:
    with report or nullcontext():
        try:
            job_json = _read(args.job) if args.job else report.read_job()
            run = _connect_session if args.spark_connect else _classic_session
            with run(args.source_file, job_json, prepare) as (spark, work):
                if report:  # the driver's address, once its context is up: the work goes on meanwhile
                    spark.when_ready(lambda: report.driver_started(spark.driver()))
                result = work(spark)
        except Exception as exc:
            if report:
                report.failed(exc)
            raise
        if report:
            report.succeeded(result)
        else:
            print(json.dumps(result, sort_keys=True), flush=True)
    return 0


@contextmanager
def _classic_session(source_file: str | None, job_json: str, prepare: Prepare) -> Iterator[tuple[Any, Any]]:
    from airflow_provider_mysqlcdc.spark.starting import SparkStart

    app_name, work = prepare(job_json)
    spark = SparkStart.begin(app_name)  # the context starts while the work begins (starting.py)
    try:
        yield spark, work
    finally:
        spark.stop()


@contextmanager
def _connect_session(source_file: str, job_json: str, prepare: Prepare) -> Iterator[tuple[Any, Any]]:
    from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
    from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
    from airflow_provider_mysqlcdc.spark.connect import ConnectSession, connect_session
    from airflow_provider_mysqlcdc.spark.starting import SparkStart

    session = ConnectSession.from_private_file(source_file)
    if not session:
        raise ConfigurationError(f"{source_file} holds no Spark Connect session (--spark-connect)")
    _, work = prepare(job_json, source=SourceConfig.from_private_file(Path(source_file)),
                      server_file=session.server_credentials_file)
    with connect_session(session.url, session.conf) as spark:
        yield SparkStart.of(spark, session.url), work


def _read(location: str) -> str:
    import fsspec

    with fsspec.open(location, "r") as handle:
        return handle.read()
