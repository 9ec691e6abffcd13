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


ARCHIVE = "-XX:SharedArchiveFile=/cache/a.jsa"


def test_a_driver_on_this_machine_gets_the_class_archive_after_its_other_java_options():
    assert program_conf(LOCAL, "python3", _stream(), class_archive=lambda: ARCHIVE)[JAVA] == f"{QUIET_DRIVER_JVM} {ARCHIVE}"
    assert program_conf(LOCAL, "python3", "", class_archive=lambda: ARCHIVE)[JAVA] == ARCHIVE
    target = SparkTarget("spark_default", "local[2]", conf={JAVA: "-Xmx2g"})
    assert program_conf(target, "python3", _stream(), class_archive=lambda: ARCHIVE)[JAVA] == f"-Xmx2g {ARCHIVE}"


def test_a_driver_on_the_cluster_or_a_target_sharing_classes_itself_gets_no_class_archive():
    cluster = SparkTarget("spark_default", "spark://master:7077", deploy_mode="cluster")
    assert JAVA not in program_conf(cluster, "python3", "", class_archive=lambda: ARCHIVE)
    own = SparkTarget("spark_default", "local[2]", conf={JAVA: "-Xshare:off"})
    assert program_conf(own, "python3", "", class_archive=lambda: ARCHIVE)[JAVA] == "-Xshare:off"
