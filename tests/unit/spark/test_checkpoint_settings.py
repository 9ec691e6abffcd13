"""A local stream checkpoint is written through the raw local file system and Spark's
file-system-based manager (spark/checkpoint.py); a checkpoint anywhere else keeps Spark's defaults."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.spark.checkpoint import LOCAL_SETTINGS, local_checkpoint_settings


@pytest.mark.parametrize("checkpoint", ["/var/lib/mysqlcdc/state/checkpoint", "file:///var/lib/cp", "file:/var/lib/cp",
                                        "relative/checkpoint"])
def test_a_checkpoint_on_the_drivers_disk_gets_the_local_settings(checkpoint):
    assert local_checkpoint_settings(checkpoint) == LOCAL_SETTINGS


@pytest.mark.parametrize("checkpoint", ["hdfs://namenode/state/checkpoint", "s3a://bucket/state/checkpoint",
                                        "viewfs://cluster/state/checkpoint", "abfss://c@acct.dfs.core.windows.net/cp"])
def test_a_checkpoint_elsewhere_keeps_sparks_defaults(checkpoint):
    assert local_checkpoint_settings(checkpoint) == {}
