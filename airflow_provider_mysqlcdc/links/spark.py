"""The "Spark UI" button of the chunk and stream tasks: the address their driver reported.

Airflow 3 asks ``get_link`` when a task instance finishes, in the task's own process, and stores the
answer in XCom under the link's ``xcom_key``, where the UI reads it. The operators push the address
under that same key as soon as the driver is up, so the button works while the program runs (a
continuous stream's UI, for instance), and keep it on the operator for ``get_link``: a task that ran
no program (a skipped stream) has no address, and reading a missing XCom would log an error."""

from __future__ import annotations

from typing import Any

from airflow.providers.common.compat.sdk import BaseOperatorLink

#: the XCom key the operators push the driver's Spark UI address under, as soon as it is up
SPARK_UI_XCOM_KEY = "spark_ui_url"


class SparkUiLink(BaseOperatorLink):
    """Links a chunk or stream task instance to its Spark application's UI (while it runs)."""

    name = "Spark UI"

    @property
    def xcom_key(self) -> str:
        return SPARK_UI_XCOM_KEY

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return getattr(operator, "spark_ui_url", "") or ""
