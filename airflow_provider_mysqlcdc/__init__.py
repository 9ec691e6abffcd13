"""airflow-provider-mysqlcdc: lock-free chunked MySQL CDC, orchestrated by Airflow, executed on Spark.

The public surface is what this module exports (``__all__``, described in docs/api.md):

    from airflow_provider_mysqlcdc import mysqlcdc_params, mysqlcdc_pipeline

the builder and its DAG params, the operators, the hooks, the triggers (with ``table_watcher``),
``sink_table_asset`` and the error tree under ``CdcError``. Every other module (``cdc/``,
``protocol/``, ``sinks/``, ``stream/``, ``spark/``, ``state/``...) is internal and may change
between releases without notice.

The Airflow names are imported when first used (PEP 562), so that ``import airflow_provider_mysqlcdc``
and the CDC core under it stay free of Airflow and pyspark: Spark executors import the package
without Airflow. The errors are imported at once (cdc/errors.py imports nothing heavy).

Layout:
  cdc/          the CDC core (no Airflow, no Spark): model, source access, planning, reading,
                binlog and record utilities. Spark executors import only this.

Test servers, workloads, the demo and the DAG runner live outside the package, in the checkout's
``devtools/``: they are never installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from airflow_provider_mysqlcdc.cdc.errors import (
    BinlogPurgedError,
    CdcError,
    ConcurrentStateChange,
    ConfigurationError,
    InternalError,
    LeaseLost,
    MaintenanceNotAnswered,
    PlanNotFinished,
    PreflightError,
    PreflightFailures,
    ProtocolError,
    ProtocolVersionError,
    SchemaChangedError,
    SchemaChangeRefused,
    SourceChangedError,
    SourceUnavailableError,
    SparkJobFailed,
    StreamAlreadyRunning,
)

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.assets.sink_tables import sink_table_asset
    from airflow_provider_mysqlcdc.hooks.iceberg_catalog import IcebergCatalogHook
    from airflow_provider_mysqlcdc.hooks.mysqlcdc import MySqlCdcHook
    from airflow_provider_mysqlcdc.hooks.object_store import ObjectStoreHook
    from airflow_provider_mysqlcdc.hooks.spark import MySqlCdcSparkHook
    from airflow_provider_mysqlcdc.operators.collect import MySqlCdcCollectSplitsOperator
    from airflow_provider_mysqlcdc.operators.maintenance import MySqlCdcMaintenanceOperator
    from airflow_provider_mysqlcdc.operators.plan import MySqlCdcPlanOperator
    from airflow_provider_mysqlcdc.operators.snapshot import MySqlCdcSnapshotOperator
    from airflow_provider_mysqlcdc.operators.stream import MySqlCdcStreamOperator
    from airflow_provider_mysqlcdc.pipeline import mysqlcdc_params, mysqlcdc_pipeline
    from airflow_provider_mysqlcdc.triggers.stream import MySqlCdcStreamTrigger
    from airflow_provider_mysqlcdc.triggers.table_changes import MySqlCdcTableChangedTrigger, table_watcher

__version__ = "0.1.0"

#: each name that needs Airflow, and the module it is imported from when first used
_LAZY: dict[str, str] = {
    "mysqlcdc_pipeline": "airflow_provider_mysqlcdc.pipeline",
    "mysqlcdc_params": "airflow_provider_mysqlcdc.pipeline",
    "MySqlCdcPlanOperator": "airflow_provider_mysqlcdc.operators.plan",
    "MySqlCdcSnapshotOperator": "airflow_provider_mysqlcdc.operators.snapshot",
    "MySqlCdcCollectSplitsOperator": "airflow_provider_mysqlcdc.operators.collect",
    "MySqlCdcStreamOperator": "airflow_provider_mysqlcdc.operators.stream",
    "MySqlCdcMaintenanceOperator": "airflow_provider_mysqlcdc.operators.maintenance",
    "MySqlCdcHook": "airflow_provider_mysqlcdc.hooks.mysqlcdc",
    "IcebergCatalogHook": "airflow_provider_mysqlcdc.hooks.iceberg_catalog",
    "ObjectStoreHook": "airflow_provider_mysqlcdc.hooks.object_store",
    "MySqlCdcSparkHook": "airflow_provider_mysqlcdc.hooks.spark",
    "MySqlCdcStreamTrigger": "airflow_provider_mysqlcdc.triggers.stream",
    "MySqlCdcTableChangedTrigger": "airflow_provider_mysqlcdc.triggers.table_changes",
    "table_watcher": "airflow_provider_mysqlcdc.triggers.table_changes",
    "sink_table_asset": "airflow_provider_mysqlcdc.assets.sink_tables",
}

__all__ = [
    # the builder and its DAG params
    "mysqlcdc_pipeline",
    "mysqlcdc_params",
    # operators
    "MySqlCdcPlanOperator",
    "MySqlCdcSnapshotOperator",
    "MySqlCdcCollectSplitsOperator",
    "MySqlCdcStreamOperator",
    "MySqlCdcMaintenanceOperator",
    # hooks
    "MySqlCdcHook",
    "IcebergCatalogHook",
    "ObjectStoreHook",
    "MySqlCdcSparkHook",
    # triggers and assets
    "MySqlCdcStreamTrigger",
    "MySqlCdcTableChangedTrigger",
    "table_watcher",
    "sink_table_asset",
    # errors
    "CdcError",
    "ConfigurationError",
    "ProtocolError",
    "ProtocolVersionError",
    "PreflightError",
    "PreflightFailures",
    "BinlogPurgedError",
    "SourceChangedError",
    "SchemaChangedError",
    "SchemaChangeRefused",
    "SourceUnavailableError",
    "ConcurrentStateChange",
    "StreamAlreadyRunning",
    "LeaseLost",
    "SparkJobFailed",
    "MaintenanceNotAnswered",
    "PlanNotFinished",
    "InternalError",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
