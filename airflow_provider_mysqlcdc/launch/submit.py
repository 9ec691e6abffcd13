"""Running the programs of ``spark/jobs/`` with spark-submit, through the apache-spark provider's
``SparkSubmitHook`` (``SparkJobRunner``), and what every runner shares (the Spark Connect one is
launch/connect_runner.py): the programs' environment, their private credentials file, their outcome.

Where a program runs is a ``SparkTarget`` (resolved from Airflow connections by hooks/spark.py).
Killing goes through the hook's ``on_kill`` (the driver on the cluster too). The installed pyspark's
``spark-submit`` comes first on the PATH: the binlog source is a Python data source, which needs
that exact Spark version on the driver.

The job, the program's log lines, its driver's address (the Spark UI) and its result travel through
a report folder in the pipeline's state location (spark/report.py), so the driver may run on the
cluster: ``deploy-mode: cluster``. A Python program cannot be submitted in cluster mode to a
standalone master (spark-submit refuses it), so there it is started by Spark's own ``PythonRunner``
as the driver's main class. In cluster mode the driver reads the package zip and the private
credentials file at the paths the task wrote them: the task's temporary directory must be on a file
system the cluster's machines share (or set ``TMPDIR`` to one).

The source password never goes into argv, Spark conf or the environment of Spark's processes: it
sits in a private file whose path the program gets as ``--source-file``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.cdc.errors import SparkJobFailed
from airflow_provider_mysqlcdc.cdc.source.connection import ENV_PREFIX, SourceConfig
from airflow_provider_mysqlcdc.launch.class_archive import archive_options
from airflow_provider_mysqlcdc.protocol.envelope import RECORD
from airflow_provider_mysqlcdc.protocol.jobs import DRIVER, StreamJob, stream_engine_of
from airflow_provider_mysqlcdc.protocol.results import DriverInfo
from airflow_provider_mysqlcdc.spark.connect import CONNECT_MODE_VARIABLES
from airflow_provider_mysqlcdc.spark.report import ReportWatcher
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials

log = logging.getLogger(__name__)

#: environment Spark's processes do not inherit: our credentials, and Airflow's connections and
#: variables (an Airflow worker configured through the environment holds passwords there)
PRIVATE_ENV_PREFIXES = (ENV_PREFIX, "AIRFLOW_CONN_", "AIRFLOW_VAR_")


def output_tail(path: Path, lines: int) -> str:
    """The last ``lines`` of a process's output file, for an error saying how it ended."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def program_environment(private: Collection[str] = ()) -> dict[str, str]:
    """This process's environment without private variables (and those named in ``private``), for a
    program it starts: it gets its credentials in its private file."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(PRIVATE_ENV_PREFIXES) and k not in private and k not in CONNECT_MODE_VARIABLES}


def spark_environment(py_files_zip: Path, python: str, local: bool, private: Collection[str] = ()) -> dict[str, str]:
    """The environment spark-submit runs in: this one without private variables (and those named in
    ``private``: credentials this process installed, which reach the program in its private file),
    the installed pyspark's ``spark-submit`` first on the PATH, and the package zip on the Python path."""
    env = program_environment(private)
    # Python workers the driver's JVM starts itself (the streaming data source's planner) do not
    # get --py-files on their path; they inherit the JVM's PYTHONPATH, so the zip goes there too.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(py_files_zip), env.get("PYTHONPATH", "")) if p)
    env["PATH"] = os.pathsep.join(p for p in (str(spark_home() / "bin"), env.get("PATH", "")) if p)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = python
    if local:  # a local master needs no network beyond loopback
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def prepare_program(work: Path, source: SourceConfig, object_store: ObjectStoreCredentials | None,
                    report: ReportWatcher, job_json: str) -> Path:
    """What a program an operator starts gets: the private credentials file in ``work`` (the source's
    and the object store's; returns its path), and the job in a report folder cleared of what an
    earlier attempt of the task's try left."""
    secrets = source.to_private_file(work / "source.json")
    if object_store:
        object_store.add_to_private_file(secrets)
    report.remove()
    report.write_job(job_json)
    return secrets


def job_arguments(report: ReportWatcher, source_file: Path, args: list[str] | None = None) -> list[str]:
    return ["--report-to", report.folder, "--source-file", str(source_file), *(args or [])]


def job_outcome(report: ReportWatcher, what: str, exit_problem: str | None) -> dict[str, Any]:
    """The program's result from its report folder, or ``SparkJobFailed`` with its own error (else
    ``exit_problem``: how spark-submit ended, with its output's tail)."""
    failure = report.failure()
    if failure is not None:
        raise SparkJobFailed(f"{what} failed: {failure}")
    result = report.result()
    if result is None:
        raise SparkJobFailed(f"{what} ended without a result in {report.folder}"
                             + (f": {exit_problem}" if exit_problem else " (its driver was stopped, or died)"))
    return result


#: what Spark says when a program's Python workers did not start (a loaded worker machine: the JVM
#: waits a fixed time for each to connect back), before the program did any work of its own
START_FAILURES = ("Python worker failed to connect back", "Timed out while waiting for the Python worker to connect back")
#: how many times a program whose Python workers failed to start is run, and the pause before each new try
START_ATTEMPTS, START_PAUSES_S = 3, (5.0, 20.0)


def started_again(run: Callable[[], Any], what: str, *, log: logging.Logger | Any,
                  sleep: Callable[[float], None] = time.sleep) -> Any:
    """``run()`` (a Spark program to its end, or to its driver's start), run again when it fails
    because Spark's Python workers did not start (``START_FAILURES``), up to ``START_ATTEMPTS`` times;
    any other failure is raised at once. The programs are safe to run again: a chunk replaces its
    splits' ranges, a stream applies each change once (its positions, its lease)."""
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return run()
        except Exception as exc:  # noqa: BLE001 - SparkJobFailed, or a Spark Connect session's own error
            if attempt == START_ATTEMPTS or not any(marker in str(exc) for marker in START_FAILURES):
                raise
            pause = START_PAUSES_S[min(attempt, len(START_PAUSES_S)) - 1]
            log.warning("%s: Spark's Python workers did not start (%s); starting it again in %.0fs (try %d of %d)",
                        what, next(m for m in START_FAILURES if m in str(exc)), pause, attempt + 1, START_ATTEMPTS)
            sleep(pause)
    raise AssertionError("unreachable")


def wait_for_driver(report: ReportWatcher, what: str, *, ended: Callable[[], bool], problem: Callable[[], str | None],
                    on_line: Callable[[str], None], on_driver: Callable[[Any], None], timeout_s: float,
                    on_timeout: Callable[[], None]) -> None:
    """Follow a detached program's report folder until its driver is up. Raises ``SparkJobFailed``
    with its own error when it fails first (or ``ended()`` before, with ``problem()``), and after
    ``timeout_s`` (calling ``on_timeout`` first: stop it)."""
    deadline = time.monotonic() + timeout_s
    while report.driver is None:
        report.poll(on_line, on_driver)
        if report.failure() is not None or problem() or ended():
            job_outcome(report, what, problem())  # raises, unless it already finished
        if time.monotonic() > deadline:
            on_timeout()
            raise SparkJobFailed(f"{what}: no driver came up within {timeout_s:.0f}s")
        time.sleep(1)


#: Spark redacts conf and environment entries whose key matches this in its UI and event logs: its own
#: default plus the key forms above
REDACTION_REGEX = (r"(?i)secret|password|token|access[.]?key|account[.]?key|encryption[.]?key|credential|"
                   r"(^|[.\-_])sas([.\-_]|$)|signature|mysqlcdc_source")
#: and values anywhere in plans and logs that look like credentials in URLs or key=value text
REDACTION_STRING_REGEX = r"(?i)(://[^/:@\s]+:)[^@/\s]+(?=@)|(password|secret|token)\s*[=:]\s*[^\s,;&]+"
#: what every job gets unless ``spark_conf`` says otherwise
DEFAULT_CONF = {"spark.sql.shuffle.partitions": "4", "spark.redaction.regex": REDACTION_REGEX,
                "spark.redaction.string.regex": REDACTION_STRING_REGEX}
#: Spark's own launcher of Python programs, the driver's main class in standalone cluster mode
PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"


@dataclass(frozen=True)
class SparkTarget:
    """The ``spark`` connection every job of a pipeline is submitted through, and the conf added."""

    conn_id: str
    master: str
    deploy_mode: str = "client"
    conf: dict[str, str] = field(default_factory=dict)
    #: a ``spark_connect`` connection: programs run as Spark Connect sessions (launch/connect_runner.py)
    connect: bool = False
    #: on Spark Connect, the private credentials file on the server its Python workers read (spark/connect.py)
    server_credentials_file: str = ""

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @property
    def standalone_cluster(self) -> bool:
        return self.deploy_mode == "cluster" and self.master.startswith("spark://")


def program_conf(target: SparkTarget, python: str, job_json: str = "", *,
                 class_archive: Callable[[], str] = lambda: "") -> dict[str, str]:
    """The conf a program is submitted with: the defaults, its Python, then the target's own; a stream
    on the driver engine (``job_json``) gets ``QUIET_DRIVER_JVM`` unless the target sets the driver's
    Java options itself; a driver on this machine (client mode) gets the options ``class_archive``
    gives (launch/class_archive.py ``archive_options``, asked only then) after any other, unless the
    target shares classes itself."""
    conf = {**DEFAULT_CONF, "spark.pyspark.python": python, **target.conf}
    if job_json and _runs_in_the_driver(job_json, target):
        conf.setdefault("spark.driver.extraJavaOptions", QUIET_DRIVER_JVM)
    options = conf.get("spark.driver.extraJavaOptions", "")
    if target.deploy_mode == "client" and "SharedArchiveFile" not in options and "-Xshare" not in options:
        if archive := class_archive():
            conf["spark.driver.extraJavaOptions"] = f"{options} {archive}".strip()
    return conf


#: the driver JVM of a stream on the driver engine only holds the Spark session, its batches being read
#: and merged in Python (stream/loop.py): compiled by the quick JIT alone and with the serial collector,
#: it starts sooner (an available-now run of 1,000 changes: 10.5-12.0 s -> 7.8-10.8 s on a busy machine)
#: and no JIT or collector thread competes with the stream for the cores
QUIET_DRIVER_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _runs_in_the_driver(job_json: str, target: SparkTarget) -> bool:
    body = json.loads(job_json)
    if body.get(RECORD) != StreamJob.FORMAT.kind:
        return False
    return stream_engine_of(body.get("stream_engine"), spark_connect=target.connect) == DRIVER


@dataclass(frozen=True)
class _Submission:
    work: Path  # the task's private folder: package zip, credentials file
    report: Any  # ReportWatcher of the program's report folder
    application: str
    env: dict[str, str]


class SparkJobRunner:
    """One program of ``spark/jobs/`` at a time, submitted with ``SparkSubmitHook``; killable."""

    def __init__(self, target: SparkTarget, *, name: str, log: Any, python: str = sys.executable):
        self.target = target
        self.name = name
        self.log = log
        self.python = python
        self._hook: Any = None
        self._report: ReportWatcher | None = None  # the running program's ReportWatcher: it knows the driver once it is up

    def run(self, script: str, job_json: str, *, source: SourceConfig, report_folder: str,
            on_driver: Callable[[DriverInfo], None] | None = None,
            object_store: ObjectStoreCredentials | None = None) -> dict[str, Any]:
        """Submit ``script`` with ``job_json``; the program's log lines go to the task log as they come.
        Returns its result, or raises ``SparkJobFailed`` with its own error."""
        from airflow.providers.common.compat.sdk import AirflowException

        submission = self._prepare(script, job_json, source, object_store, report_folder, detached=False)
        report = submission.report
        try:
            stop = threading.Event()
            follower = threading.Thread(target=report.follow, args=(stop, lambda line: self.log.info("%s", line),
                                                                    self._driver_started(on_driver)), daemon=True)
            follower.start()
            problem = None
            try:
                self._hook.submit(submission.application, env=submission.env, start_new_session=True)
            except AirflowException as exc:  # how spark-submit ended, with its output's tail
                problem = str(exc)
            finally:
                stop.set()
                follower.join()
            return job_outcome(report, f"Spark program {script}", problem)
        finally:
            report.remove()
            shutil.rmtree(submission.work, ignore_errors=True)

    def start(self, script: str, job_json: str, *, source: SourceConfig, report_folder: str,
              on_driver: Callable[[DriverInfo], None] | None = None, start_timeout_s: float = 600,
              object_store: ObjectStoreCredentials | None = None) -> None:
        """Submit ``script`` detached: return once its driver is up, and leave it running on its own
        (the caller watches its report folder: launch/supervision.py). In client mode spark-submit is
        the driver: it runs in a session of its own and outlives the task's process. The program
        removes the task's private folder (its credentials file) when it ends; a driver killed with
        -9 leaves that folder in the temporary directory. Raises ``SparkJobFailed`` when it fails before its driver is up."""
        from airflow.providers.common.compat.sdk import AirflowException

        submission = self._prepare(script, job_json, source, object_store, report_folder, detached=True)
        report, problems = submission.report, []

        def submit() -> None:
            try:
                self._hook.submit(submission.application, env=submission.env, start_new_session=True)
            except AirflowException as exc:
                problems.append(str(exc))

        submitter = threading.Thread(target=submit, name="spark-submit", daemon=True)
        submitter.start()
        wait_for_driver(report, f"Spark program {script}",
                        ended=lambda: not submitter.is_alive() and not self.target.standalone_cluster,
                        problem=lambda: problems[0] if problems else None,
                        on_line=lambda line: self.log.info("%s", line), on_driver=self._driver_started(on_driver),
                        timeout_s=start_timeout_s, on_timeout=self.on_kill)

    def _driver_started(self, on_driver: Callable[[DriverInfo], None] | None) -> Callable[[DriverInfo], None]:
        def driver_started(info: DriverInfo) -> None:
            self.log.info("Spark application %s, driver on %s%s", info.app_id, info.host,
                          f", Spark UI {info.ui_url}" if info.ui_url else "")
            if on_driver:
                on_driver(info)

        return driver_started

    def _prepare(self, script: str, job_json: str, source: SourceConfig, object_store: ObjectStoreCredentials | None,
                 report_folder: str, *, detached: bool) -> "_Submission":
        """The work folder (package zip, private credentials file: the source's and the object store's),
        the report folder with the job in it, and the hook that submits ``script``."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        from airflow_provider_mysqlcdc.spark.packaging import build_py_files_zip, launcher_jar, spark_job_script
        from airflow_provider_mysqlcdc.spark.report import ReportWatcher

        work = Path(tempfile.mkdtemp(prefix="mysqlcdc-"))  # 0700: the credentials file lives here
        report = self._report = ReportWatcher(report_folder)
        try:
            secrets = prepare_program(work, source, object_store, report, job_json)
            py_files = build_py_files_zip(work / "airflow_provider_mysqlcdc.zip")
            args = job_arguments(report, secrets, ["--remove-source-folder"] if detached else [])
            conf = program_conf(self.target, self.python, job_json, class_archive=lambda: archive_options(spark_home()))
            if self.target.standalone_cluster:
                conf.setdefault("spark.standalone.submit.waitAppCompletion", "false" if detached else "true")
                # what --py-files sets for a Python program: the zip shipped to executors, on their path
                conf["spark.submit.pyFiles"] = str(py_files)
                # Python workers the driver's JVM starts itself (the stream's data source planner) get
                # neither: their Python functions carry the spark.executorEnv.* variables
                conf["spark.executorEnv.PYTHONPATH"] = str(py_files)
                application, java_class = str(launcher_jar(work / "launcher.jar")), PYTHON_RUNNER
                args = [str(spark_job_script(script)), str(py_files), *args]
            else:
                application, java_class = str(spark_job_script(script)), None
                if self.target.deploy_mode == "client":
                    conf.setdefault("spark.log.level", "WARN")  # the driver's JVM log is the task log
            self._hook = SparkSubmitHook(conf=conf, conn_id=self.target.conn_id, name=self.name, java_class=java_class,
                                         py_files=None if java_class else str(py_files),
                                         files=str(py_files) if java_class else None, application_args=args)
            private = object_store.variables if object_store else ()
            return _Submission(work, report, application, spark_environment(py_files, self.python,
                                                                              local=self.target.local, private=private))
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise

    def on_kill(self) -> None:
        """Stop the running program: the provider's ``on_kill`` (spark-submit, and the driver on a
        cluster), then the driver's process group when it runs on this machine."""
        if self._hook is not None:
            self._hook.on_kill()
        driver = self._report.driver if self._report is not None else None
        if driver is None or self.target.deploy_mode != "client" or driver.host != socket.getfqdn():
            return
        try:
            group = os.getpgid(driver.pid)
        except ProcessLookupError:
            return
        if group == os.getpgid(0):
            return  # not a group of its own: never signal the task's own group
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.getpgid(driver.pid)
                except ProcessLookupError:
                    return
                time.sleep(0.2)
