"""Provider metadata for Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any

from airflow_provider_mysqlcdc import __version__

#: the one integration the operators, hooks and triggers belong to
INTEGRATION = "MySQL CDC"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-mysqlcdc",
        "name": "MySQL CDC",
        "description": "Lock-free chunked MySQL/MariaDB CDC (Flink CDC 2.x) orchestrated by Airflow, executed on Spark.",
        "versions": [__version__],
        # the modules of the operators, hooks and triggers docs/api.md lists (the package exports their classes)
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "operators": [{"integration-name": INTEGRATION,
                       "python-modules": ["airflow_provider_mysqlcdc.operators.plan",
                                          "airflow_provider_mysqlcdc.operators.snapshot",
                                          "airflow_provider_mysqlcdc.operators.collect",
                                          "airflow_provider_mysqlcdc.operators.stream",
                                          "airflow_provider_mysqlcdc.operators.maintenance"]}],
        "hooks": [{"integration-name": INTEGRATION,
                   "python-modules": ["airflow_provider_mysqlcdc.hooks.mysqlcdc",
                                      "airflow_provider_mysqlcdc.hooks.iceberg_catalog",
                                      "airflow_provider_mysqlcdc.hooks.object_store",
                                      "airflow_provider_mysqlcdc.hooks.spark"]}],
        "triggers": [{"integration-name": INTEGRATION,
                      "python-modules": ["airflow_provider_mysqlcdc.triggers.stream",
                                         "airflow_provider_mysqlcdc.triggers.table_changes"]}],
        "extra-links": ["airflow_provider_mysqlcdc.links.spark.SparkUiLink"],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_mysqlcdc.hooks.mysqlcdc.MySqlCdcHook",
                "hook-name": "MySQL CDC source",
                "connection-type": "mysqlcdc",
                "ui-field-behaviour": {
                    "hidden-fields": [],
                    "relabeling": {"schema": "Default database", "login": "User"},
                    "placeholders": {"host": "mysql.example.internal", "port": "3306"},
                },
                "conn-fields": {
                    "server_id_range": {
                        "label": "Server-id range",
                        "description": "Replica server ids the binlog readers may use, e.g. 5400-6399; "
                                       "must not clash with real replicas of this server.",
                        "schema": {"type": ["string", "null"], "default": "5400-6399"},
                    },
                    "retry_budget_s": {
                        "label": "Retry budget (seconds)",
                        "description": "How long a source outage (restart, dropped connection) may last before a "
                                       "chunk or stream task fails; meanwhile they retry with backoff.",
                        "schema": {"type": ["number", "null"], "default": 300},
                    },
                    "ssl_ca": {"label": "TLS CA file", "description": "Path of the CA certificate (enables TLS)",
                               "schema": {"type": ["string", "null"]}},
                    "ssl_cert": {"label": "TLS client certificate file", "schema": {"type": ["string", "null"]}},
                    "ssl_key": {"label": "TLS client key file", "schema": {"type": ["string", "null"]}},
                    "ssl_verify_identity": {"label": "Verify server host name",
                                            "schema": {"type": ["boolean", "null"], "default": True}},
                    "mask_salt": {"label": "Masking salt",
                                  "description": "The secret key of the column rules' hash mask (columns=...); "
                                                 "kept like the password, never logged.",
                                  "schema": {"type": ["string", "null"]}, "sensitive": True},
                },
            },
            {
                "hook-class-name": "airflow_provider_mysqlcdc.hooks.iceberg_catalog.IcebergCatalogHook",
                "hook-name": "Iceberg catalog of a MySQL CDC lake",
                "connection-type": "iceberg_catalog",
                # everything is pyiceberg's catalog properties, in the extras
                "ui-field-behaviour": {"hidden-fields": ["host", "port", "schema", "login", "password"],
                                       "relabeling": {}, "placeholders": {
                                           "extra": '{"type": "sql", "uri": "postgresql+psycopg2://user:pass@host/db"}'}},
            },
        ],
        # ``airflow config list`` shows these with their defaults (the code's fallbacks are the same)
        "config": {"mysqlcdc": {"description": "The MySQL CDC provider (airflow-provider-mysqlcdc).", "options": {
            "local_spark": {
                "description": "How a pipeline's Spark programs run on a local master without a spark_conn_id: "
                               "'shared' (sessions on one local Spark Connect server the worker's tasks share, "
                               "started by the first and stopped when idle) or 'submit' (a spark-submit, so a "
                               "JVM, per task).",
                "version_added": "0.1.0", "type": "string", "example": "submit", "default": "shared"},
            "local_spark_idle_s": {
                "description": "Seconds the shared local Spark server stays up with no task using it.",
                "version_added": "0.1.0", "type": "float", "example": "900", "default": "300"},
            "state_dirs": {
                "description": "Comma-separated state locations (or folders right above them) whose pipelines "
                               "the MySQL CDC page of the UI shows.",
                "version_added": "0.1.0", "type": "string", "example": "/data/state", "default": ""},
        }}},
    }
