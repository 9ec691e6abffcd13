"""The pipelines page in the Airflow UI: an Airflow 3 plugin (registered through the package's
``airflow.plugins`` entry point) that mounts a FastAPI app on the API server at ``/mysqlcdc`` and
adds it to the UI's navigation as an external view ("MySQL CDC", shown in Airflow's frame).

``/mysqlcdc/`` is the page (plugins/pipelines_page.py), ``/mysqlcdc/api/pipelines`` the same as
JSON; both for signed-in users only. It reads the pipelines' state locations, nothing else: every pipeline whose state location
is one of ``[mysqlcdc] state_dirs`` (comma-separated; ``AIRFLOW__MYSQLCDC__STATE_DIRS``) or a
folder right under one (the builder puts a pipeline at ``<state_dir>/<dag_id>``). A state location
on an object store is read with the API server's own credentials.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.api_fastapi.core_api.security import requires_authenticated
from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import conf
from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse

from airflow_provider_mysqlcdc.cdc.model.split import encode_value
from airflow_provider_mysqlcdc.plugins.pipelines_page import page, pipeline_section
from airflow_provider_mysqlcdc.state.registry import GENERATIONS, PipelineState
from airflow_provider_mysqlcdc.state.storage import StateStorage
from airflow_provider_mysqlcdc.status import pipeline_status

log = logging.getLogger(__name__)

URL_PREFIX = "/mysqlcdc"


def state_dirs() -> list[str]:
    return [d.strip() for d in conf.get("mysqlcdc", "state_dirs", fallback="").split(",") if d.strip()]


def pipelines(dirs: list[str]) -> dict[str, str]:
    """Each pipeline found in ``dirs``: its name (the folder's) and its state location."""
    found: dict[str, str] = {}
    for root in dirs:
        storage = StateStorage(root)
        candidates = [root] if storage.exists(GENERATIONS) else \
            [f"{root.rstrip('/')}/{name}" for name in storage.list_names()]
        for location in candidates:
            if StateStorage(location).exists(GENERATIONS):
                found.setdefault(location.rstrip("/").rsplit("/", 1)[-1], location)
    return dict(sorted(found.items()))


def split_listing(location: str) -> dict[str, list[dict[str, Any]]]:
    """Per captured table, its finished splits as the page lists them."""
    generation = PipelineState(location).latest()
    return {str(table): [{"index": f.split.index, "start": encode_value(f.split.start), "end": encode_value(f.split.end),
                          "rows": f.rows, "high_watermark": str(f.high_watermark), "staged": bool(f.staged),
                          "stream_only": f.stream_only} for f in captured.splits]
            for table, captured in sorted(generation.tables.items())}


def _read(location: str) -> tuple[dict[str, Any] | None, dict[str, list[dict[str, Any]]], str | None]:
    try:
        return pipeline_status(location), split_listing(location), None
    except Exception as exc:  # noqa: BLE001 - one unreadable pipeline does not hide the others
        log.warning("cannot read the pipeline state at %s: %s", location, exc)
        return None, {}, f"{type(exc).__name__}: {exc}"


#: signed-in users only, as Airflow's own API: the session cookie the UI holds (the page opens in
#: Airflow's frame) or a bearer token, checked by the deployment's auth manager
AUTHENTICATED = requires_authenticated()

app = FastAPI(title="MySQL CDC pipelines", description="The pipelines' state, as bin/status shows it",
              dependencies=[Depends(AUTHENTICATED)])


@app.get("/", response_class=HTMLResponse)
def pipelines_page() -> str:
    dirs = state_dirs()
    sections = [pipeline_section(name, *_read(location)) for name, location in pipelines(dirs).items()]
    return page(sections, state_dirs=dirs)


@app.get("/api/pipelines")
def pipelines_json() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, location in pipelines(state_dirs()).items():
        status, splits, error = _read(location)
        out[name] = {"status": status, "splits": splits, "error": error}
    return out


class MySqlCdcPlugin(AirflowPlugin):
    name = "mysqlcdc"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "MySQL CDC pipelines"}]
    external_views = [{"name": "MySQL CDC", "href": f"{URL_PREFIX}/", "destination": "nav", "url_route": "mysqlcdc",
                       "category": "browse"}]
