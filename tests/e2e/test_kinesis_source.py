"""The Kinesis source end to end: real Spark (local[2]) reading a real kinesalite.

Run as a script, this module is the Spark job that test_kill_9_and_restart kills and restarts.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from common import kinesis
from pipeline.kinesis_source import SCHEMA, KinesisDataSource

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve()
SCHEMA_COLUMNS = [column.split()[0] for column in SCHEMA.split(", ")]


def spark_session() -> SparkSession:
    # Python data sources plan in a Python worker started from PYSPARK_PYTHON, not spark.pyspark.python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kinesis-source-test")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.dataSource.register(KinesisDataSource)
    return spark


@pytest.fixture(scope="module")
def spark(stack: dict[str, Any]) -> Iterator[SparkSession]:
    session = spark_session()
    yield session
    session.stop()


def new_stream(shards: int) -> str:
    name = f"test-{uuid.uuid4().hex[:8]}"
    kinesis.ensure_stream(kinesis.client(), name, shards)
    return name


def clicks(start: int, count: int, users: int = 20) -> list[tuple[str, bytes]]:
    """Records whose payload names the user and a per-run sequence number."""
    return [
        (f"u{i % users}", json.dumps({"userid": f"u{i % users}", "n": i}).encode())
        for i in range(start, start + count)
    ]


def payload_numbers(df: DataFrame) -> list[int]:
    return [json.loads(bytes(row.data))["n"] for row in df.select("data").collect()]


def assert_exactly_once(numbers: list[int], expected: int) -> None:
    duplicates = [n for n, c in Counter(numbers).items() if c > 1]
    assert not duplicates, f"records read more than once: {duplicates[:10]}"
    assert sorted(numbers) == list(range(expected)), f"{expected - len(set(numbers))} records missing"


def read_available_now(spark: SparkSession, stream: str, base: Path, **options: str) -> DataFrame:
    """Run the stream once into Spark's exactly-once parquet sink and return everything the sink holds."""
    query = (
        spark.readStream.format("kinesis")
        .option("streamName", stream)
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(base / "out"))
        .option("checkpointLocation", str(base / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    return sink_rows(spark, base / "out")


def sink_rows(spark: SparkSession, folder: Path) -> DataFrame:
    """What the parquet sink committed (its _spark_metadata log hides files of unfinished batches)."""
    return spark.read.schema(SCHEMA).parquet(str(folder))


def test_ensure_stream_is_idempotent(stack: dict[str, Any]) -> None:
    client = kinesis.client()
    name = new_stream(2)
    kinesis.ensure_stream(client, name, 2)
    summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    assert (summary["StreamStatus"], summary["OpenShardCount"]) == ("ACTIVE", 2)


def test_available_now_reads_every_record_once_and_resumes(spark: SparkSession, tmp_path: Path) -> None:
    stream = new_stream(2)
    kinesis.put_records(kinesis.client(), stream, clicks(0, 1500))
    first = read_available_now(spark, stream, tmp_path)
    assert sorted(r.shard_id for r in first.select("shard_id").distinct().collect()) == [
        "shardId-000000000000",
        "shardId-000000000001",
    ]
    assert_exactly_once(payload_numbers(first), 1500)

    kinesis.put_records(kinesis.client(), stream, clicks(1500, 700))
    assert_exactly_once(payload_numbers(read_available_now(spark, stream, tmp_path)), 2200)


def test_latest_skips_what_was_there_before(spark: SparkSession, tmp_path: Path) -> None:
    stream = new_stream(2)
    kinesis.put_records(kinesis.client(), stream, [("old", b'{"n": -1}')] * 50)
    time.sleep(1.1)  # LATEST starts at the server's clock, which has second precision
    assert read_available_now(spark, stream, tmp_path, startingPosition="LATEST").count() == 0
    kinesis.put_records(kinesis.client(), stream, clicks(0, 300))
    rows = read_available_now(spark, stream, tmp_path, startingPosition="LATEST")
    assert_exactly_once(payload_numbers(rows), 300)


def wait_active(client: Any, stream: str) -> None:
    while (
        client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
        != "ACTIVE"
    ):
        time.sleep(0.1)


def reshard_while_producing(stream: str, total: int) -> None:
    """Produce `total` records in small batches; split shard 0 after a third, merge its children after
    two thirds."""
    client = kinesis.client()
    shard = client.list_shards(StreamName=stream)["Shards"][0]
    low, high = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    for start in range(0, total, 50):
        kinesis.put_records(client, stream, clicks(start, 50))
        if start == total // 3 // 50 * 50:
            client.split_shard(
                StreamName=stream, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((low + high) // 2)
            )
            wait_active(client, stream)
        if start == 2 * total // 3 // 50 * 50:
            children = [
                s["ShardId"]
                for s in client.list_shards(StreamName=stream)["Shards"]
                if s.get("ParentShardId") == shard["ShardId"]
            ]
            client.merge_shards(StreamName=stream, ShardToMerge=children[0], AdjacentShardToMerge=children[1])
            wait_active(client, stream)
        time.sleep(0.05)


@contextmanager
def streaming_in_batches(spark: SparkSession, stream: str, base: Path, **options: str) -> Iterator[None]:
    """The stream read in batches of at most 400 while the block runs, then to its end; each batch into a
    folder of its own, with every row's place in the batch (overwriting the folder makes a replayed batch
    idempotent)."""

    def write_batch(df: DataFrame, batch_id: int) -> None:
        ordered = df.withColumn("pos", F.monotonically_increasing_id())
        ordered.write.mode("overwrite").parquet(str(base / "out" / f"batch={batch_id}"))

    query = (
        spark.readStream.format("kinesis")
        .option("streamName", stream)
        .option("maxRecordsPerBatch", "400")
        .options(**options)
        .load()
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", str(base / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        yield
        query.processAllAvailable()
    finally:
        query.stop()


def batch_rows(spark: SparkSession, base: Path) -> list[Any]:
    """What streaming_in_batches wrote: the source's columns, `batch` and `pos`."""
    return spark.read.parquet(str(base / "out")).collect()


def test_resharding_while_streaming_keeps_every_record_once_and_in_order(
    spark: SparkSession, tmp_path: Path
) -> None:
    stream, total = new_stream(2), 3000
    with streaming_in_batches(spark, stream, tmp_path), ThreadPoolExecutor(1) as producer:
        producer.submit(reshard_while_producing, stream, total).result(timeout=180)

    rows = batch_rows(spark, tmp_path)
    assert_exactly_once([json.loads(bytes(r.data))["n"] for r in rows], total)
    assert len({r.shard_id for r in rows}) == 5, "the split and the merge must both have happened"
    by_key: dict[str, list[Any]] = {}
    for row in sorted(rows, key=lambda r: (r.batch, r.pos)):
        by_key.setdefault(row.partition_key, []).append(row)
    for key, key_rows in by_key.items():
        numbers = [json.loads(bytes(r.data))["n"] for r in key_rows]
        assert numbers == sorted(numbers), f"records of {key} out of order across shards"
    assert any(len({r.shard_id for r in key_rows}) >= 3 for key_rows in by_key.values())


@contextmanager
def spark_job(stream: str, base: Path, max_records: int) -> Iterator[subprocess.Popen[bytes]]:
    """This module run as a Spark job in its own process group, killed with everything it started."""
    with (base / "job.log").open("ab") as log:
        job = subprocess.Popen(
            [sys.executable, str(SCRIPT), stream, str(base), str(max_records)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield job
    finally:
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def wait_for(
    job: subprocess.Popen[bytes], base: Path, condition: Callable[[], bool], interval: float
) -> None:
    deadline = time.monotonic() + 180
    while not condition():
        if job.poll() is not None or time.monotonic() > deadline:
            log = (base / "job.log").read_text()
            pytest.fail(f"the Spark job ended or timed out (exit {job.returncode}):\n{log[-5000:]}")
        time.sleep(interval)


def batch_ids(folder: Path) -> set[int]:
    return {int(p.name) for p in folder.glob("[0-9]*")} if folder.exists() else set()


def test_kill_9_and_restart_loses_and_doubles_nothing(spark: SparkSession, tmp_path: Path) -> None:
    stream, total = new_stream(2), 1000
    kinesis.put_records(kinesis.client(), stream, clicks(0, total))
    offsets, commits = tmp_path / "checkpoint" / "offsets", tmp_path / "checkpoint" / "commits"

    # Kill while a batch is planned in the offset log but not committed: the restart must replay it.
    def inside_a_batch() -> bool:
        return len(batch_ids(commits)) >= 2 and bool(batch_ids(offsets) - batch_ids(commits))

    with spark_job(stream, tmp_path, max_records=100) as job:
        wait_for(job, tmp_path, inside_a_batch, interval=0.02)
        os.killpg(job.pid, signal.SIGKILL)  # the JVM and the Python workers die with the driver
        job.wait()
    assert batch_ids(offsets) - batch_ids(commits), "the kill must land inside a batch"
    assert 0 < sink_rows(spark, tmp_path / "out").count() < total

    # A different batch size on restart: the replayed batch is defined by the offset log alone.
    with spark_job(stream, tmp_path, max_records=total) as job:
        wait_for(job, tmp_path, lambda: sink_rows(spark, tmp_path / "out").count() >= total, interval=1)
    assert_exactly_once(payload_numbers(sink_rows(spark, tmp_path / "out")), total)


class FaultProxy(ThreadingHTTPServer):
    """Sits in front of kinesalite, fails chosen calls and counts the records GetRecords serves:
    kinesalite never throttles and only expires iterators after 5 minutes. PutRecords faults reject every
    other record of the request."""

    FAULTS: dict[str, dict[int, str]] = {  # operation -> {call number: fault}
        "ListShards": {1: "LimitExceededException"},
        "GetShardIterator": {2: "ProvisionedThroughputExceededException"},
        "GetRecords": {
            2: "ProvisionedThroughputExceededException",
            3: "ExpiredIteratorException",
            5: "ProvisionedThroughputExceededException",
            6: "ExpiredIteratorException",
        },
        "PutRecords": {1: "PartialFailure", 2: "PartialFailure"},
    }

    def __init__(self, upstream: str, faults: dict[str, dict[int, str]]) -> None:
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.faults = faults
        self.calls: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self.served = 0  # records in GetRecords answers
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def fault_for(self, operation: str) -> str | None:
        with self.lock:
            self.calls[operation] += 1
            fault = self.faults.get(operation, {}).get(self.calls[operation])
            if fault:
                self.injected[f"{operation}:{fault}"] += 1
            return fault

    def forward(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        connection = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            connection.request("POST", path, body, {**headers, "Content-Length": str(len(body))})
            response = connection.getresponse()
            return response.status, response.getheader("Content-Type", ""), response.read()
        finally:
            connection.close()


class ProxyHandler(BaseHTTPRequestHandler):
    server: FaultProxy

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        fault = self.server.fault_for(self.headers.get("X-Amz-Target", "").rpartition(".")[2])
        if fault == "PartialFailure":
            self.reply(200, "application/x-amz-json-1.1", self.partial_put(headers, body))
        elif fault:
            error = {"__type": fault, "message": "injected by the test proxy"}
            self.reply(400, "application/x-amz-json-1.1", json.dumps(error).encode())
        else:
            status, content_type, data = self.server.forward(self.path, headers, body)
            if status == 200 and self.headers.get("X-Amz-Target", "").endswith(".GetRecords"):
                with self.server.lock:
                    self.server.served += len(json.loads(data)["Records"])
            self.reply(status, content_type, data)

    def partial_put(self, headers: dict[str, str], body: bytes) -> bytes:
        request = json.loads(body)
        records = request["Records"]
        status, _, upstream = self.server.forward(
            self.path, headers, json.dumps({**request, "Records": records[::2]}).encode()
        )
        assert status == 200, upstream
        written = iter(json.loads(upstream)["Records"])
        rejected = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "injected"}
        results = [next(written) if i % 2 == 0 else rejected for i in range(len(records))]
        return json.dumps(
            {"FailedRecordCount": sum("ErrorCode" in r for r in results), "Records": results}
        ).encode()

    def reply(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: the proxy's counters are what the test checks."""


@contextmanager
def running_proxy(faults: dict[str, dict[int, str]]) -> Iterator[FaultProxy]:
    proxy = FaultProxy(os.environ["STREAMFOLD_KINESIS_ENDPOINT"], faults)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.fixture
def fault_proxy(stack: dict[str, Any]) -> Iterator[FaultProxy]:
    with running_proxy(FaultProxy.FAULTS) as proxy:
        yield proxy


@pytest.fixture
def counting_proxy(stack: dict[str, Any]) -> Iterator[FaultProxy]:
    with running_proxy({}) as proxy:
        yield proxy


def test_throttling_partial_failures_and_expired_iterators_are_survived(
    spark: SparkSession, tmp_path: Path, fault_proxy: FaultProxy
) -> None:
    stream, total = new_stream(2), 1200
    kinesis.put_records(kinesis.client(endpoint_url=fault_proxy.url), stream, clicks(0, total))
    # Nothing handed from the driver, so the executors read too and meet the GetRecords faults.
    no_cache = {"maxCachedBytesPerBatch": "0"}
    rows = read_available_now(spark, stream, tmp_path, endpointUrl=fault_proxy.url, **no_cache)
    assert_exactly_once(payload_numbers(rows), total)
    planned = Counter(
        f"{op}:{fault}" for op, faults in FaultProxy.FAULTS.items() for fault in faults.values()
    )
    assert fault_proxy.injected == planned


def test_kinesis_serves_each_record_once_and_rows_do_not_depend_on_what_the_driver_kept(
    spark: SparkSession, tmp_path: Path, counting_proxy: FaultProxy
) -> None:
    stream, total = new_stream(2), 2000
    kinesis.put_records(kinesis.client(), stream, clicks(0, total))
    served: dict[str, int] = {}
    runs: dict[str, list[Any]] = {}
    # Every record kept by the driver (the default cap), a part of every batch (a batch of 400 of these
    # records counts about 60,000 bytes against the cap), none (the executors read every record again).
    for name, cap in (
        ("kept", {}),
        ("capped", {"maxCachedBytesPerBatch": "20000"}),
        ("none kept", {"maxCachedBytesPerBatch": "0"}),
    ):
        before = counting_proxy.served
        with streaming_in_batches(spark, stream, tmp_path / name, endpointUrl=counting_proxy.url, **cap):
            pass  # the stream is already complete: read it to its end
        served[name] = counting_proxy.served - before
        runs[name] = batch_rows(spark, tmp_path / name)
        assert_exactly_once([json.loads(bytes(r.data))["n"] for r in runs[name]], total)
        assert max(Counter(r.batch for r in runs[name]).values()) <= 400, f"{name}: maxRecordsPerBatch"
        for shard in {r.shard_id for r in runs[name]}:
            in_order = sorted((r for r in runs[name] if r.shard_id == shard), key=lambda r: (r.batch, r.pos))
            numbers = [int(r.sequence_number) for r in in_order]
            assert numbers == sorted(numbers), f"{name}: {shard} out of order"
    # An executor's read can fetch a page past its segment's end, so only the first count is exact.
    assert served["kept"] == total
    assert served["capped"] > total and served["none kept"] >= 2 * total

    def columns(rows: list[Any]) -> list[tuple[Any, ...]]:
        return sorted(tuple(r[c] for c in SCHEMA_COLUMNS) for r in rows)

    assert columns(runs["kept"]) == columns(runs["capped"]) == columns(runs["none kept"])


def main(stream: str, base: str, max_records: str) -> None:
    """The Spark job test_kill_9_and_restart runs: the stream into a parquet sink."""
    (
        spark_session()
        .readStream.format("kinesis")
        .option("streamName", stream)
        .option("maxRecordsPerBatch", max_records)
        .load()
        .writeStream.format("parquet")
        .option("path", f"{base}/out")
        .option("checkpointLocation", f"{base}/checkpoint")
        .trigger(processingTime="100 milliseconds")
        .start()
        .awaitTermination()
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
