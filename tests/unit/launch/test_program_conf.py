"""What conf a program is submitted with (launch/submit.py program_conf)."""

from __future__ import annotations

from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.launch.submit import QUIET_DRIVER_JVM, SparkTarget, program_conf
from airflow_provider_mysqlcdc.protocol.jobs import ChunkJob, StreamJob
from airflow_provider_mysqlcdc.protocol.sinks import SinkSpec

LOCAL = SparkTarget("spark_default", "local[2]")
JAVA = "spark.driver.extraJavaOptions"


def _stream(**settings) -> str:
    return StreamJob(state="/s", sink=SinkSpec("/lake"), **settings).to_json()


def test_a_stream_on_the_driver_engine_gets_a_quiet_driver_jvm():
    assert program_conf(LOCAL, "python3", _stream())[JAVA] == QUIET_DRIVER_JVM
    assert program_conf(LOCAL, "python3", _stream(stream_engine="driver"))[JAVA] == QUIET_DRIVER_JVM


def test_a_structured_streaming_stream_and_a_chunk_job_keep_the_jvm_defaults():
    chunk = ChunkJob(table=str(TableId("db", "t")), splits=[], sink=SinkSpec("/lake")).to_json()
    for job_json in (_stream(stream_engine="structured-streaming"), chunk, ""):
        assert JAVA not in program_conf(LOCAL, "python3", job_json)


def test_the_targets_own_driver_java_options_win():
    target = SparkTarget("spark_default", "local[2]", conf={JAVA: "-Xmx2g"})
    assert program_conf(target, "python3", _stream())[JAVA] == "-Xmx2g"
