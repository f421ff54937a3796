"""The job's guard rails: one job per checkpoint, and readable failures."""

import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.markup import escape

from common import config
from common import pipeline_file as pf
from pipeline import job
from pipeline.job import (
    JobError,
    StallReporter,
    batch_duration_ms,
    check_conf,
    check_realtime,
    exclusive,
    root_cause,
    trigger_ms,
)

ROOT = Path(__file__).resolve().parents[2]

NESTED = """[STREAM_FAILED] Query [id = 1] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR]
Traceback (most recent call last):
  File "/work/main/pipeline/sinks.py", line 109, in commit
    write(conn)
psycopg.errors.NotNullViolation: null value in column "recorded_at" violates not-null constraint
DETAIL:  Failing row contains (...)
	at py4j.Protocol.getReturnValue(Protocol.java:476)
"""


def test_root_cause_is_the_innermost_error_line():
    assert root_cause(NESTED) == (
        'psycopg.errors.NotNullViolation: null value in column "recorded_at" violates not-null constraint'
    )


# Abridged from a job that lost its Kafka broker in the middle of reading a batch.
KAFKA_CAUSE = (
    "org.apache.kafka.common.errors.TimeoutException: "
    "Timeout of 60000ms expired before the position for partition clicks-1 could be determined"
)
THROUGH_PY4J = "\n".join(
    [
        "Traceback (most recent call last):",
        '  File "pipeline/sinks.py", line 458, in write_batch',
        "py4j.protocol.Py4JJavaError: An error occurred while calling o3088.getResult.",
        ": org.apache.spark.SparkException: Exception thrown in awaitResult:",
        "\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:56)",
        "Caused by: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 failed",
        f"Caused by: {KAFKA_CAUSE}",
        " SQLSTATE: 39000",
        "Caused by: py4j.Py4JException: An exception was raised by the Python Proxy. Return Message: ...",
        "py4j.protocol.Py4JJavaError: An error occurred while calling o3088.getResult.",
    ]
)


def test_root_cause_looks_through_py4j_and_spark_job_wrappers():
    assert root_cause(THROUGH_PY4J) == KAFKA_CAUSE


def test_root_cause_falls_back_to_the_first_line():
    assert root_cause("something odd\nmore") == "something odd"


def test_a_second_job_on_the_same_home_is_refused(tmp_path):
    lock = tmp_path / "run.lock"
    with exclusive(lock), pytest.raises(JobError, match="another `streamfold run` holds"), exclusive(lock):
        pass
    with exclusive(lock):  # released again
        pass


def test_a_mistyped_conf_key_is_refused_not_ignored():
    check_conf({"join.max_wait": "5s", "spark.sql.shuffle.partitions": "2", "trigger.interval": "1s"})
    with pytest.raises(JobError, match=r"unknown --conf key\(s\) join.max_wiat"):
        check_conf({"join.max_wiat": "5s"})


def test_avro_events_without_a_registry_url_stop_the_start_before_any_service(tmp_path, monkeypatch):
    """The endpoints lead nowhere: the registry's missing setting is the error, before the database is
    asked (check_applied) or Spark starts."""
    monkeypatch.delenv(config.REGISTRY_URL_VAR, raising=False)
    monkeypatch.setenv("STREAMFOLD_HOME", str(tmp_path))  # no stack.env to fall back to
    text = (
        (ROOT / pf.DEFAULT_FILE)
        .read_text()
        .replace("  kafka_topic: clicks\n", "  kafka_topic: clicks\n  format: avro\n")
    )
    nowhere = config.Settings("host=127.0.0.1 port=1", "127.0.0.1:1", "http://127.0.0.1:1", "", tmp_path)
    settings = replace(nowhere, pipeline=pf.parse(text))
    with pytest.raises(config.ConfigError, match="STREAMFOLD_REGISTRY_URL is not set: Avro events"):
        job.run(settings, "kafka", once=True, conf={})


def test_avro_outputs_without_a_registry_url_stop_the_start_before_any_service(tmp_path, monkeypatch):
    monkeypatch.delenv(config.REGISTRY_URL_VAR, raising=False)
    monkeypatch.setenv("STREAMFOLD_HOME", str(tmp_path))
    text = (ROOT / pf.DEFAULT_FILE).read_text().replace("outputs:\n", "outputs:\n  format: avro\n")
    nowhere = config.Settings("host=127.0.0.1 port=1", "127.0.0.1:1", "http://127.0.0.1:1", "", tmp_path)
    settings = replace(nowhere, pipeline=pf.parse(text))
    assert settings.pipeline.outputs.format == "avro"
    with pytest.raises(config.ConfigError, match="STREAMFOLD_REGISTRY_URL is not set: Avro outputs"):
        job.run(settings, "kafka", once=True, conf={})


def test_trigger_interval_defaults_and_parses():
    assert trigger_ms({}) == 500
    assert trigger_ms({"trigger.interval": "2s"}) == 2000
    with pytest.raises(JobError, match="trigger.interval"):
        trigger_ms({"trigger.interval": "soon"})


def test_a_query_waiting_on_an_unreachable_kafka_says_so(spark, tmp_path):
    said: list[str] = []
    stalls = StallReporter(said.append, after_s=2)
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", "127.0.0.1:9")  # nothing listens on the discard port
        .option("subscribe", "clicks")
        .option("kafka.default.api.timeout.ms", "5000")  # so that stop() returns soon after
        .load()
        .writeStream.queryName("stuck")
        .format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while not said and time.monotonic() < deadline:
            stalls.check([query])
            time.sleep(0.5)
        stalls.check([query])
    finally:
        query.stop()
    assert len(said) == 1, said  # once per phase, not once per poll
    assert said[0].startswith(
        f"[yellow]stuck[/]: {escape('Getting offsets from KafkaV2[Subscribe[clicks]]')} for "
    )


def test_the_pipeline_files_join_settings_are_the_defaults_conf_overrides():
    pipeline = pf.load()
    assert job.file_join_conf(pipeline) == {
        "join.mode": "event_time",
        "join.max_wait": "10000ms",
        "join.version_retention": "604800000ms",
    }


def test_a_new_checkpoint_gets_at_least_4_state_partitions_an_existing_one_keeps_its_own(spark, tmp_path):
    shuffle = "spark.sql.shuffle.partitions"
    said: list[str] = []
    try:
        job.partition_new_checkpoint(spark, tmp_path / "new", {}, said.append)
        assert spark.conf.get(shuffle) == "4"  # local[2]: two cores, and at least 4
        assert said and said[0].startswith("a new checkpoint with 4 state partitions")
        spark.conf.set(shuffle, "2")
        (tmp_path / "old" / "offsets").mkdir(parents=True)
        (tmp_path / "old" / "offsets" / "0").write_text("v1")
        job.partition_new_checkpoint(spark, tmp_path / "old", {}, said.append)  # Spark restores its own
        job.partition_new_checkpoint(spark, tmp_path / "new", {shuffle: "3"}, said.append)  # --conf's
        assert spark.conf.get(shuffle) == "2"
        assert len(said) == 1
        (tmp_path / "crashed" / "offsets").mkdir(parents=True)  # its first batch wrote no offsets
        job.partition_new_checkpoint(spark, tmp_path / "crashed", {}, said.append)
        assert spark.conf.get(shuffle) == "4"
    finally:
        spark.conf.set(shuffle, "2")  # the session's, for the other unit tests


def test_realtime_mode_refuses_what_it_cannot_run_in_one_line():
    default = pf.load(ROOT / pf.DEFAULT_FILE)
    for source, once, expected in (
        ("kinesis", False, "--mode realtime reads Kafka events only: the kinesis source"),
        ("kafka", True, "--once runs micro-batches"),
    ):
        with pytest.raises(JobError, match=expected) as refused:
            check_realtime(default, source, once, {})
        assert "\n" not in str(refused.value)
    avro = default.model_copy(update={"outputs": default.outputs.model_copy(update={"format": "avro"})})
    with pytest.raises(JobError, match="publishes JSON aggregate topics only"):
        check_realtime(avro, "kafka", False, {})
    check_realtime(default, "kafka", False, {})  # the default pipeline runs in real-time mode
    check_realtime(pf.load(ROOT / "examples" / "parcels" / "pipeline.yaml"), "kafka", False, {})  # tables too


def test_realtime_batch_duration_defaults_to_5_minutes_and_parses():
    assert batch_duration_ms({}) == 300_000
    assert batch_duration_ms({"trigger.batch_duration": "30s"}) == 30_000
    for bad in ("soon", "0s", "4s"):  # Spark's minimum: 5 s
        with pytest.raises(JobError, match="trigger.batch_duration"):
            batch_duration_ms({"trigger.batch_duration": bad})
    lowered = {"trigger.batch_duration": "1s", "spark.sql.streaming.realTimeMode.minBatchDuration": "1s"}
    assert batch_duration_ms(lowered) == 1_000


def test_a_new_real_time_checkpoint_gets_4_state_partitions_whatever_the_cores(spark, tmp_path, monkeypatch):
    # Real-time mode's tasks hold their slots for a whole batch, the sources' beside the join's: the state
    # partitions must not take every slot of realtime_local_master.
    monkeypatch.setattr(job.spark_session, "state_partitions", lambda _spark: 16)
    said: list[str] = []
    try:
        job.partition_new_checkpoint(spark, tmp_path / "new", {}, said.append, realtime=True)
        assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
        assert said == [
            "a new checkpoint with 4 state partitions, fixed from now on (real-time mode's; --conf "
            "spark.sql.shuffle.partitions=N on a new checkpoint chooses)"
        ]
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
