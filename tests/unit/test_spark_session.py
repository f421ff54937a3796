"""The Spark session's plumbing (pipeline/spark.py): checkpoints through the forkless local file system, and
Python workers started by pipeline/pyspark_daemon.py. Both on the real local session the unit tests share."""

from __future__ import annotations

import json
import stat
import zipfile
import zipimport
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline import spark as spark_session


def test_local_masters_get_the_forkless_checkpoints_and_others_keep_hadoops_defaults():
    local = spark_session.settings({"spark.master": "local[2]"})
    assert local["spark.hadoop.fs.file.impl"] == "io.streamfold.fs.ForklessLocalFileSystem"
    class_path = local["spark.driver.extraClassPath"].split(":")
    assert class_path[0].endswith("streamfold-join.jar")
    # the sink's kafka-clients and Postgres driver too: a class on the JVM's class path cannot see spark.jars
    assert {Path(j).name.split("-")[0] for j in class_path} >= {"kafka", "postgresql"}
    cluster = spark_session.settings({"spark.master": "spark://master:7077"})
    assert "spark.hadoop.fs.file.impl" not in cluster
    assert "spark.sql.streaming.checkpointFileManagerClass" not in cluster
    # Spark's own daemon on a cluster: ours would import the executors' installed `pipeline` before the
    # driver's shipped code is on the path
    assert local["spark.python.daemon.module"] == "pipeline.pyspark_daemon"
    assert cluster["spark.python.daemon.module"] == "pyspark.daemon"


def test_the_master_is_conf_then_streamfold_spark_master_then_local(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("STREAMFOLD_HOME", str(tmp_path))  # no stack.env there
    monkeypatch.delenv("STREAMFOLD_SPARK_MASTER", raising=False)
    assert spark_session.settings()["spark.master"] == "local[*]"
    monkeypatch.setenv("STREAMFOLD_SPARK_MASTER", "spark://127.0.0.1:7077")
    assert spark_session.settings()["spark.master"] == "spark://127.0.0.1:7077"
    assert spark_session.settings()["spark.executor.memory"] == "2g"
    assert (
        spark_session.settings()["spark.driver.host"] == "127.0.0.1"
    )  # a cluster on loopback: the driver too
    assert "spark.driver.host" not in spark_session.settings({"spark.master": "spark://m:7077"})
    assert spark_session.settings({"spark.master": "local[2]"})["spark.master"] == "local[2]"
    monkeypatch.setenv(
        "STREAMFOLD_SINK_RETRY_S", "30"
    )  # the executors' Kinesis reads retry as long as the driver
    assert spark_session.settings()["spark.executorEnv.STREAMFOLD_SINK_RETRY_S"] == "30"


def test_real_time_mode_gets_a_task_slot_for_each_joins_state_partitions(monkeypatch, tmp_path: Path):
    # A real-time batch holds a slot per source partition and per state partition of every join's operator.
    monkeypatch.setenv("STREAMFOLD_HOME", str(tmp_path))  # no stack.env there
    monkeypatch.delenv("STREAMFOLD_SPARK_MASTER", raising=False)
    assert spark_session.realtime_conf({})["spark.master"] == "local[16]"
    assert spark_session.realtime_conf({}, joins=3)["spark.master"] == "local[24]"
    assert spark_session.realtime_conf({"spark.master": "local[4]"}, joins=3)["spark.master"] == "local[4]"


def test_executors_get_the_drivers_code_as_a_zip(tmp_path: Path):
    with zipfile.ZipFile(spark_session.code_zip(tmp_path)) as archive:
        shipped = set(archive.namelist())
    assert {"pipeline/topology.py", "pipeline/kinesis_source.py", "common/config.py"} <= shipped
    assert {name.split("/")[0] for name in shipped} == set(spark_session.SHIPPED_PACKAGES)


def test_the_file_system_sets_permissions_without_chmod(spark: SparkSession, tmp_path: Path):
    jvm = spark._jvm  # type: ignore[attr-defined]
    conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(f"file://{tmp_path}/sub/file")
    fs = path.getFileSystem(conf)
    assert fs.getClass().getName() == "io.streamfold.fs.ForklessLocalFileSystem"
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission
    assert fs.mkdirs(path.getParent(), permission.createImmutable(0o750))
    out = fs.create(path, permission.createImmutable(0o640), True, 4096, 1, 1024 * 1024, None)
    out.write(b"x")
    out.close()
    # What Hadoop asks for, less its umask (spark.hadoop.fs.permissions.umask-mode 077): owner only.
    assert stat.S_IMODE((tmp_path / "sub").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "sub" / "file").stat().st_mode) == 0o600
    assert (tmp_path / "sub" / ".file.crc").exists()  # still Hadoop's checksummed local file system


def test_a_stateful_query_checkpoints_through_it(spark: SparkSession, tmp_path: Path):
    """A RocksDB-state aggregation run twice on one checkpoint: the second run resumes from the state and
    offsets the first wrote through the forkless file system and the FileSystem-based checkpoint manager."""
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()

    def run(name: str, keys: list[str]) -> dict[str, int]:
        (source / f"{name}.json").write_text("".join(json.dumps({"k": k}) + "\n" for k in keys))
        query = (
            spark.readStream.schema("k string")
            .json(str(source))
            .groupBy("k")
            .count()
            .writeStream.outputMode("complete")
            .format("memory")
            .queryName(f"counts_{name}")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return {r["k"]: r["count"] for r in spark.table(f"counts_{name}").collect()}

    assert run("first", ["a", "a", "b"]) == {"a": 2, "b": 1}
    assert run("second", ["a", "c"]) == {"a": 3, "b": 1, "c": 1}
    assert sorted(p.name for p in (checkpoint / "commits").iterdir() if p.name.isdigit()) == ["0", "1"]


def test_python_workers_run_under_the_daemon_that_keeps_zip_directories(spark: SparkSession):
    def worker_patch(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:  # pickled by value
        name = zipimport.zipimporter.invalidate_caches.__name__
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"id": batch.column(0), "invalidate": [name] * batch.num_rows})

    seen = spark.range(4).mapInArrow(worker_patch, "id long, invalidate string").select(F.col("invalidate"))
    assert {r["invalidate"] for r in seen.collect()} == {"_keep_directory"}


def test_a_local_driver_maps_the_class_archive_when_there_is_one(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("STREAMFOLD_JARS", str(tmp_path))
    local, cluster = {"spark.master": "local[2]"}, {"spark.master": "spark://m:7077"}
    assert "SharedArchiveFile" not in spark_session.settings(local)["spark.driver.extraJavaOptions"]
    (tmp_path / "streamfold.jsa").write_bytes(b"")
    options = spark_session.settings(local)["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={tmp_path / 'streamfold.jsa'}" in options
    assert options.startswith(spark_session.DEFAULTS["spark.driver.extraJavaOptions"])
    # a cluster's driver has another class path: the archive would not match it
    assert "SharedArchiveFile" not in spark_session.settings(cluster)["spark.driver.extraJavaOptions"]
    # the user's own options win, as for every key
    mine = spark_session.settings({**local, "spark.driver.extraJavaOptions": "-Xss4m"})
    assert mine["spark.driver.extraJavaOptions"] == "-Xss4m"


def test_the_sessions_temporary_files_are_private(spark: SparkSession):
    """Shuffle files (events with their profile columns) and the JVM's temporary files land in folders only
    their owner may enter, whatever the umask of the process that started the session (pytest's: 022)."""
    rows = spark.range(2000).select((F.col("id") % 7).alias("k")).groupBy("k").count().collect()
    assert len(rows) == 7  # a shuffle wrote its files under the block manager's folders
    # The block manager's folders are blockmgr-* in each spark.local.dir (py4j cannot reach SparkEnv on 4.3).
    roots = [Path(d) for d in spark.conf.get("spark.local.dir").split(",")]
    local_dirs = [d for root in roots for d in root.glob("blockmgr-*")]
    assert local_dirs, f"no blockmgr-* under {roots}"
    jvm = spark.sparkContext._jvm  # noqa: SLF001 - no Python API for the JVM's temporary folder
    temp = Path(str(jvm.java.lang.System.getProperty("java.io.tmpdir")))
    for folder in [*local_dirs, temp]:
        assert folder.stat().st_mode & 0o077 == 0, f"{folder} is open to others"
        assert not folder.samefile("/tmp"), "the session writes straight into /tmp"
        opened = [p for p in folder.rglob("*") if p.lstat().st_mode & 0o077]
        assert not opened, f"open to others: {opened[:5]}"
    assert any(any(d.rglob("shuffle_*")) for d in local_dirs), "no shuffle file was written"
