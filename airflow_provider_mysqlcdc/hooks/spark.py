"""Running the pipeline's Spark programs through the apache-spark provider's ``SparkSubmitHook``.

Where they run is an Airflow ``spark`` connection, the provider's own type, read by its hook: host
and port (the master URL), ``deploy-mode``, ``queue``, ``namespace``, ``spark-binary`` and Kerberos
mean exactly what they mean for ``SparkSubmitOperator``, and killing goes through the hook's
``on_kill`` (the driver on the cluster too). Without a connection, ``spark_master`` (default
``local[2]``) becomes one, defined the way Airflow defines connections from the environment.
Two differences, both deliberate:

- a connection id that does not exist fails (the provider's hook silently falls back to YARN);
- the installed pyspark's ``spark-submit`` comes first on the PATH: the binlog source is a Python
  data source, which needs that exact Spark version on the driver.

The job, the program's log lines, its driver's address (the Spark UI) and its result travel through
a report folder in the pipeline's state location (spark/report.py), so the driver may run on the
cluster: ``deploy-mode: cluster``. A Python program cannot be submitted in cluster mode to a
standalone master (spark-submit refuses it), so there it is started by Spark's own ``PythonRunner``
as the driver's main class. In cluster mode the driver reads the package zip and the private
credentials file at the paths the task wrote them: the task's temporary directory must be on a file
system the cluster's machines share (or set ``TMPDIR`` to one).

``spark_conf`` is passed as ``--conf`` arguments, which any user of the machine can see, so keys that
look like secrets are refused (give those through the environment or a credentials provider).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_mysqlcdc.cdc.errors import ConfigurationError
from airflow_provider_mysqlcdc.cdc.source.connection import SourceConfig
from airflow_provider_mysqlcdc.protocol.results import DriverInfo
from airflow_provider_mysqlcdc.spark.connect import SERVER_FILE_EXTRA
from airflow_provider_mysqlcdc.state.credentials import ObjectStoreCredentials

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.spark.report import ReportWatcher

#: conf keys that hold secrets, ours and the object stores' (S3 secret and session keys, SSE-C keys,
#: GCS service-account keys, Azure account keys and SAS tokens): refused in ``spark_conf``
_SECRET_LOOKING = re.compile(r"password|secret|token|credential|access[.\-_]?key|private[.\-_]?key|account[.\-_]?key|"
                             r"encryption[.\-_]?key|sse[.\-_]?c|(^|[.\-_])sas([.\-_]|$)|signature|keyfile|json[.\-_]?key",
                             re.IGNORECASE)
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
    #: a ``spark_connect`` connection: programs run as Spark Connect sessions (hooks/spark_connect.py)
    connect: bool = False
    #: on Spark Connect, the private credentials file on the server its Python workers read (spark/connect.py)
    server_credentials_file: str = ""

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @property
    def standalone_cluster(self) -> bool:
        return self.deploy_mode == "cluster" and self.master.startswith("spark://")


def spark_target(*, spark_conn_id: str | None, spark_master: str,
                 spark_conf: Mapping[str, Any] | None) -> SparkTarget:
    """Resolve the operators' ``spark_conn_id`` / ``spark_master`` / ``spark_conf`` arguments."""
    conf = checked_spark_conf(spark_conf)
    conn_id = spark_conn_id or _master_connection(spark_master)
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # the SDK raises its own "not found" type
        raise ConfigurationError(f"Spark connection {conn_id!r} does not exist ({exc}): create it (type "
                                 "'spark', host = master URL such as spark://host:7077, yarn or k8s://...; or type "
                                 "'spark_connect' for a Spark Connect server) or leave spark_conn_id unset to use "
                                 "spark_master.") from exc
    if conn.conn_type == "spark_connect":
        server_file = str(conn.extra_dejson.get(SERVER_FILE_EXTRA) or "")
        if not server_file.startswith("/"):
            raise ConfigurationError(
                f"Spark Connect connection {conn_id!r} names no {SERVER_FILE_EXTRA} in its extras"
                f"{f' (got {server_file!r}, not an absolute path)' if server_file else ''}. The server's Python "
                "workers read the source's password, and the object store's credentials unless the server has its "
                "own, from a private file on the Spark Connect server, so that no secret travels inside the "
                "functions it runs: write it there as the user the server runs as (python -m "
                "airflow_provider_mysqlcdc.spark.connect --write-server-file PATH), then set "
                f'{{"{SERVER_FILE_EXTRA}": "PATH"}} in the connection\'s extras.')
        return SparkTarget(conn_id, f"sc://{conn.host or ''}{f':{conn.port}' if conn.port else ''}", conf=conf,
                           connect=True, server_credentials_file=server_file)
    deploy_mode = conn.extra_dejson.get("deploy-mode") or "client"
    if deploy_mode not in ("client", "cluster"):
        raise ConfigurationError(f"Spark connection {conn_id!r}: deploy-mode must be 'client' or 'cluster', got "
                                 f"{deploy_mode!r}.")
    # the master URL as the provider's hook builds it from the connection (it decides how to submit)
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    master = f"{master}:{conn.port}" if conn.port else master
    return SparkTarget(conn_id, master, deploy_mode, conf)


def _master_connection(master: str) -> str:
    """A ``spark`` connection for a bare master URL, defined in this process's environment."""
    conn_id = "mysqlcdc_spark_" + hashlib.sha1(master.encode()).hexdigest()[:10]
    os.environ.setdefault(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", "host": master}))
    return conn_id


def checked_spark_conf(spark_conf: Mapping[str, Any] | None) -> dict[str, str]:
    if spark_conf is None or spark_conf == "":
        return {}
    if isinstance(spark_conf, str):  # a rendered template
        try:
            spark_conf = json.loads(spark_conf)
        except ValueError as exc:
            raise ConfigurationError(f"spark_conf is not a JSON object: {spark_conf!r}") from exc
    if not isinstance(spark_conf, Mapping):
        raise ConfigurationError(f"spark_conf must be a mapping of Spark property to value, got {spark_conf!r}")
    conf = {}
    for key, value in spark_conf.items():
        if not isinstance(key, str) or not key.startswith("spark."):
            raise ConfigurationError(f"spark_conf key {key!r} is not a Spark property (they start with 'spark.')")
        if isinstance(value, (dict, list, tuple)) or value is None:
            raise ConfigurationError(f"spark_conf[{key!r}] must be a single value, got {value!r}")
        if _SECRET_LOOKING.search(key):
            raise ConfigurationError(f"spark_conf[{key!r}] looks like a secret, and Spark conf travels as "
                                     "spark-submit arguments anyone on the machine can read: give it through the "
                                     "environment or a credentials provider of the cluster instead.")
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return conf


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

        from airflow_provider_mysqlcdc.spark.submit import job_outcome

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
        (the caller watches its report folder: spark/supervision.py). In client mode spark-submit is
        the driver: it runs in a session of its own and outlives the task's process. The program
        removes the task's private folder (its credentials file) when it ends; a driver killed with
        -9 leaves that folder in the temporary directory. Raises ``SparkJobFailed`` when it fails before its driver is up."""
        from airflow.providers.common.compat.sdk import AirflowException

        from airflow_provider_mysqlcdc.spark.submit import wait_for_driver

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
        from airflow_provider_mysqlcdc.spark.submit import job_arguments, prepare_program, spark_environment

        work = Path(tempfile.mkdtemp(prefix="mysqlcdc-"))  # 0700: the credentials file lives here
        report = self._report = ReportWatcher(report_folder)
        try:
            secrets = prepare_program(work, source, object_store, report, job_json)
            py_files = build_py_files_zip(work / "airflow_provider_mysqlcdc.zip")
            args = job_arguments(report, secrets, ["--remove-source-folder"] if detached else [])
            conf = {**DEFAULT_CONF, "spark.pyspark.python": self.python, **self.target.conf}
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
