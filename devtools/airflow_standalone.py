"""A throwaway ``airflow standalone`` (API server, scheduler, DAG processor, triggerer) and a small
client of its REST API, for behaviour only a real scheduler shows: killing a task from the UI's
point of view (mark failed, clear), ``execution_timeout``, deferral.

It runs in its own AIRFLOW_HOME on a free loopback port, with every user an admin (no login), and is
stopped by its process group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.throwaway_server import find_free_port, stop_process_group


@dataclass
class AirflowStandalone:
    env: dict[str, str]  # AIRFLOW_HOME, the DAGs folder and connections (devtools/dag_runner.example_dag_env)
    python: str = sys.executable
    port: int = field(default_factory=find_free_port)
    _process: subprocess.Popen[bytes] | None = None
    _token: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return Path(self.env["AIRFLOW_HOME"]) / "standalone.log"

    def start(self, timeout_s: float = 240) -> "AirflowStandalone":
        env = dict(self.env, AIRFLOW__API__PORT=str(self.port), AIRFLOW__API__HOST="127.0.0.1",
                   AIRFLOW__API__BASE_URL=self.url,
                   AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.url}/execution/",
                   AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
                   AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
                   # LocalExecutor starts this many workers up front (32 by default): a few suffice here
                   AIRFLOW__CORE__PARALLELISM="4",
                   AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
                   AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_SEC="2",
                   # standalone starts its components as `airflow ...` commands found on the PATH
                   PATH=os.pathsep.join([str(Path(self.python).parent), self.env.get("PATH", "")]))
        Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            self._process = subprocess.Popen([self.python, "-m", "airflow", "standalone"], env=env, stdout=out,
                                             stderr=subprocess.STDOUT, cwd=env["AIRFLOW_HOME"], start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            try:
                health = self._request("GET", "/api/v2/monitor/health", auth=False)
                if all(part.get("status") == "healthy" for name, part in health.items()
                       if name in ("metadatabase", "scheduler", "dag_processor", "triggerer")):
                    self._token = self._request("GET", "/auth/token", auth=False)["access_token"]
                    return self
            except (OSError, urllib.error.URLError, ValueError, KeyError):
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"airflow standalone did not come up:\n{self.log_file.read_text(errors='replace')[-4000:]}")

    def stop(self) -> None:
        stop_process_group(self._process)

    def __enter__(self) -> "AirflowStandalone":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- the REST API ----------------------------------------------------------------------------
    def wait_for_dag(self, dag_id: str, timeout_s: float = 120) -> None:
        self.wait_until(lambda: self._get_or_none(f"/api/v2/dags/{dag_id}"), timeout_s, f"DAG {dag_id} parsed")

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None, attempts: int = 5) -> str:
        """Trigger a run; its id. The API server answers 500 now and then on a busy machine (its SQLite
        database locked by the scheduler and the DAG processor): then, if no run was made, it asks again."""
        before = {run["dag_run_id"] for run in self.dag_runs(dag_id)}
        for attempt in range(attempts):
            try:
                return self._request("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                                     {"logical_date": None, "conf": conf or {}})["dag_run_id"]
            except urllib.error.HTTPError as exc:
                if exc.code < 500 or attempt == attempts - 1:
                    raise
            made = [run["dag_run_id"] for run in self.dag_runs(dag_id) if run["dag_run_id"] not in before]
            if made:  # the run was made before the error
                return made[-1]
            time.sleep(1)
        raise AssertionError("unreachable")

    def dag_run_state(self, dag_id: str, run_id: str) -> str | None:
        run = self._get_or_none(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        return run.get("state") if run else None

    def task_instance(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any] | None:
        suffix = "" if map_index < 0 else f"/{map_index}"
        return self._get_or_none(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}{suffix}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of a DAG run (the API's pages of at most 100 put together)."""
        found: list[dict[str, Any]] = []
        while True:
            page = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
                                        f"?limit=100&offset={len(found)}")
            found.extend(page["task_instances"])
            if not page["task_instances"] or len(found) >= page["total_entries"]:
                return found

    def task_state(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str | None:
        ti = self.task_instance(dag_id, run_id, task_id, map_index)
        return ti.get("state") if ti else None

    def mark(self, dag_id: str, run_id: str, task_id: str, state: str, map_index: int = -1) -> None:
        """What the UI's "Mark as failed/success" does."""
        suffix = "" if map_index < 0 else f"/{map_index}"
        self._request("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}{suffix}",
                      {"new_state": state})

    def clear(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> None:
        """What the UI's "Clear" does to one task instance (a running one is stopped, then re-queued)."""
        task = task_id if map_index < 0 else [task_id, map_index]
        self._request("POST", f"/api/v2/dags/{dag_id}/clearTaskInstances",
                      {"dry_run": False, "dag_run_id": run_id, "task_ids": [task], "only_failed": False,
                       "include_downstream": False, "include_upstream": False})

    def fail_unfinished_runs(self, dag_id: str) -> list[str]:
        """Mark every DAG run of ``dag_id`` that has not ended failed (what the UI's "Mark as failed" of
        a run does: its running tasks are stopped); the ids of those runs."""
        unfinished = [run["dag_run_id"] for run in self.dag_runs(dag_id) if run["state"] not in ("success", "failed")]
        for run_id in unfinished:
            self._request("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", {"state": "failed"})
        return unfinished

    def add_connection(self, conn_id: str, connection: dict[str, Any]) -> None:
        """Create connection ``conn_id`` in the metadata database (``POST /api/v2/connections``), which the
        running tasks and triggers see; ``connection`` as an ``AIRFLOW_CONN_*`` variable's JSON gives it."""
        body = {"connection_id": conn_id, **{k: v for k, v in connection.items() if k != "extra"}}
        if "extra" in connection:
            body["extra"] = json.dumps(connection["extra"])
        self._request("POST", "/api/v2/connections", body)

    def delete_connection(self, conn_id: str) -> None:
        try:
            self._request("DELETE", f"/api/v2/connections/{urllib.parse.quote(conn_id)}")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str, map_index: int = -1) -> Any:
        entry = self._get_or_none(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/"
                                  f"{key}?map_index={map_index}")
        return entry.get("value") if entry else None

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        """The task log of one try, as text (one JSON event per line)."""
        data = self._get_or_none(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/"
                                 f"{try_number}?map_index={map_index}&full_content=true")
        content = (data or {}).get("content") or []
        return "\n".join(json.dumps(entry) if not isinstance(entry, str) else entry for entry in content)

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        return (self._get_or_none(f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after") or {}).get("dag_runs", [])

    def asset_events(self, **filters: Any) -> list[dict[str, Any]] | None:
        """Asset events, oldest first (filters: ``source_dag_id``, ``source_run_id``, ...); None while
        Airflow cannot list them: its API fails (500) on an event whose triggered DAG run has not
        started yet (Airflow 3.3.2 requires the run's start date), so wait with ``wait_until``."""
        query = urllib.parse.urlencode({**filters, "order_by": "timestamp", "limit": 1000})
        try:
            return (self._get_or_none(f"/api/v2/assets/events?{query}") or {}).get("asset_events", [])
        except urllib.error.HTTPError as exc:
            if exc.code == 500:
                return None
            raise

    def signed_in_url(self, path: str) -> str:
        """A URL that signs a browser in (the simple auth manager's all-admins login sets its
        session cookie) and then opens ``path``."""
        return f"{self.url}/auth/token/login?next={urllib.parse.quote(path)}"

    def status_with_token(self, path: str, token: str) -> int:
        """The HTTP status of a GET of ``path`` presenting ``token`` as its bearer token."""
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def plugins(self) -> list[dict[str, Any]]:
        """The plugins the API server loaded (``GET /api/v2/plugins``)."""
        return self._request("GET", "/api/v2/plugins")["plugins"]

    def wait_until(self, predicate: Any, timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"airflow standalone exited while waiting for {what}")
            time.sleep(0.5)
        raise TimeoutError(f"{what}: not within {timeout_s}s\n{self.log_file.read_text(errors='replace')[-3000:]}")

    def _get_or_none(self, path: str) -> Any:
        try:
            return self._request("GET", path)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def _request(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        request = urllib.request.Request(self.url + path, method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        if auth and self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")
