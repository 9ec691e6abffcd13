"""The "Spark UI" button of the chunk and stream tasks: the address their driver reported.

Airflow 3 stores each link in XCom under the link's ``xcom_key`` when a task instance finishes; the
operators push the address under that same key as soon as the driver is up, so the button works
while the program runs (a continuous stream's UI, for instance)."""

from __future__ import annotations

from typing import Any

from airflow.providers.common.compat.sdk import BaseOperatorLink, XCom

#: the XCom key the operators push the driver's Spark UI address under, as soon as it is up
SPARK_UI_XCOM_KEY = "spark_ui_url"


class SparkUiLink(BaseOperatorLink):
    """Links a chunk or stream task instance to its Spark application's UI (while it runs)."""

    name = "Spark UI"

    @property
    def xcom_key(self) -> str:
        return SPARK_UI_XCOM_KEY

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return XCom.get_value(ti_key=ti_key, key=SPARK_UI_XCOM_KEY) or ""
