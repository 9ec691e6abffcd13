"""The randomized torture run (devtools/torture.py) for one seed: random DML and DDL while a
continuous stream runs, with kill -9, a server restart, a purge and a deleted checkpoint, and the
stream clustering a table's files once two need it, and XA transactions whose outcome comes batches after
their prepare (how often depends on the timing: the summary
counts it; test_spark_stream_job.py checks that clustering happens). Every
table the drift record does not name equals the source; after the next run's re-snapshot of the
named ones, and its capture of the table created under the stream's pattern, every table does; into
Delta tables and into Iceberg tables. ``bin/torture --seeds N [--sink-format iceberg]`` runs more seeds."""

from __future__ import annotations

import os

import pytest

from airflow_provider_mysqlcdc.sinks.factory import SINK_FORMATS
from devtools.torture import Torture

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("MYSQLCDC_TORTURE_SEED", "1"))


@pytest.mark.parametrize("sink_format", list(SINK_FORMATS))
def test_a_random_history_with_faults_ends_exact_or_named_and_re_snapshotted(tmp_path, sink_format):
    report = Torture(SEED, tmp_path, rounds=20, sink_format=sink_format).run()  # four faults, each kind once
    print("\n" + "\n".join(report.script) + "\n" + report.summary())
    assert not report.problems, report.summary()
    # XA transactions prepared in one batch, committed or rolled back in a later one
    assert any(" prepared on " in line for line in report.script)
    assert any("XA COMMIT" in line for line in report.script)
    assert any("an XA transaction prepared across it" in line for line in report.script)
    # a table created under the stream's pattern, recorded by it and captured by the next run, exact
    assert len(report.new_tables) == 1 and report.new_tables[0].startswith("torture.p"), report.summary()
