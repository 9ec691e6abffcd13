"""Maintenance requests to the running stream, and the reports that answer them.

A maintenance task that finds a live stream on the pipeline (state/lease.py) does not touch the
tables itself: it writes a ``MaintenanceRequest`` to ``maintenance/requests/<id>.json`` and waits.
The stream looks for requests between two micro-batches, when none of its merges runs, does what
each asks (sinks/delta/maintenance.py), writes a ``MaintenanceReport`` to
``maintenance/reports/<id>.json`` and removes the request. A task whose stream ended before
answering withdraws its request and maintains the tables itself.
"""

from __future__ import annotations

import time
import uuid

from airflow_provider_mysqlcdc.protocol.maintenance import MaintenanceReport, MaintenanceRequest
from airflow_provider_mysqlcdc.state.registry import PipelineState

MAINTENANCE = "maintenance"
REQUESTS, REPORTS = "requests", "reports"
#: reports kept (the oldest are removed beyond this many)
KEEP_REPORTS = 50


def new_request_id() -> str:
    """A request id that sorts by time."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


class MaintenanceRequests:
    def __init__(self, state: PipelineState):
        self.storage = state.storage

    def submit(self, request: MaintenanceRequest) -> None:
        self.storage.write_record(request, MAINTENANCE, REQUESTS, f"{request.request_id}.json")

    def pending(self) -> list[MaintenanceRequest]:
        """The requests not answered yet, oldest first."""
        names = [n for n in self.storage.list_names(MAINTENANCE, REQUESTS) if n.endswith(".json")]
        requests = [self.storage.read_record(MaintenanceRequest, MAINTENANCE, REQUESTS, n) for n in names]
        return sorted((r for r in requests if r is not None), key=lambda r: r.requested_at)

    def withdraw(self, request_id: str) -> None:
        self.storage.remove(MAINTENANCE, REQUESTS, f"{request_id}.json")

    def answer(self, report: MaintenanceReport) -> None:
        """Record what was done for the request, then remove it."""
        self.storage.write_record(report, MAINTENANCE, REPORTS, f"{report.request_id}.json", indent=1)
        self.withdraw(report.request_id)
        names = [n for n in self.storage.list_names(MAINTENANCE, REPORTS) if n.endswith(".json")]
        for name in sorted(names)[:-KEEP_REPORTS]:  # ids begin with their time (new_request_id)
            self.storage.remove(MAINTENANCE, REPORTS, name)

    def report(self, request_id: str) -> MaintenanceReport | None:
        return self.storage.read_record(MaintenanceReport, MAINTENANCE, REPORTS, f"{request_id}.json")
