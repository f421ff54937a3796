"""The Spark session: local[*] by default, any master by configuration (`--conf spark.master=...`, else
STREAMFOLD_SPARK_MASTER, which `streamfold stack up --spark-workers N` sets)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from common import config
from pipeline import class_archive

# Jars resolved by pom.xml's `spark` profile (Kafka connector, Postgres JDBC); nothing downloads at run time.
DEFAULT_JARS_DIR = Path(__file__).resolve().parents[1] / "lib" / "spark"

LOG_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"

# Where ProgressListener writes each query's last progress (status/<query>.json), and where it appends
# every progress as a JSON line (the benchmark's record); each unset means not written.
STATUS_DIR_CONF = "spark.streamfold.status.dir"
PROGRESS_LOG_CONF = "spark.streamfold.progress.log"

# A whole-stage generated method above HotSpot's 8,000-byte JIT limit would run interpreted: compile it too.
# Tiered C2 stays on: nothing is compiled per batch (the parser checks against the record's arrival,
# pipeline/sources.py), so C2 compiles the hot code once. A 256 MB code cache
# keeps HotSpot from flushing and recompiling methods. Measurements: docs/decisions/spark-settings.md,
# "The JIT".
JIT = "-XX:-DontCompileHugeMethods -XX:ReservedCodeCacheSize=256m"
# The parallel collector in the driver: a batch's objects die with it, so young collections free most of
# the heap, and unlike G1 it runs no concurrent marking and no write-barrier bookkeeping beside the tasks
# on a small machine's cores. Measurements: docs/decisions/spark-settings.md, "The garbage collector".
GC = "-XX:+UseParallelGC"

# The join's state partitions. At least 4, whatever the cores: a 2-core machine ran no faster with 2
# (docs/decisions/levers.md, "Results"), and a checkpoint cannot change its number later.
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
MIN_STATE_PARTITIONS = 4

DEFAULTS = {
    "spark.master": "local[*]",
    # transformWithState keeps its state in RocksDB (required by the operator, and bounded in memory).
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    # Commit a batch's state as a small changelog file rather than a RocksDB snapshot (snapshots are taken in
    # the background), so the per-batch commit writes only the batch's changes.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # The join's state partitions: a checkpoint fixes them at its first run, where the job raises them to
    # the cores Spark has when it has more (state_partitions).
    SHUFFLE_PARTITIONS: str(MIN_STATE_PARTITIONS),
    # Checkpoints hold the join's state (profiles) and offsets: Hadoop creates their files 0644 and folders
    # 0755 by its own umask setting (022), whatever the process's; these are the owner's only.
    "spark.hadoop.fs.permissions.umask-mode": "077",
    "spark.sql.session.timeZone": "UTC",
    # 1.625 GB: with the parallel collector a batch's garbage goes at each young collection, so the smaller
    # heap costs no speed, and a long run's peak stays under 2 GiB (docs/decisions/levers.md, "The
    # garbage collector" and "The heap after a long run").
    "spark.driver.memory": "1664m",
    "spark.ui.showConsoleProgress": "false",
    # Prometheus text format from the Spark UI (docs/operations.md, "Status and metrics"): the driver's
    # metrics, with each streaming query's rates, latency and state rows, at /metrics/prometheus;
    # executors' at /metrics/executors/prometheus.
    "spark.ui.prometheus.enabled": "true",
    "spark.metrics.conf.*.sink.prometheusServlet.class": "org.apache.spark.metrics.sink.PrometheusServlet",
    "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
    "spark.sql.streaming.metricsEnabled": "true",
    # Metric names without the application id (Spark's default prefix, new at each run), so a dashboard or an
    # alert on them (the job's own: jvm/.../status/QueryMetrics.java) survives restarts.
    "spark.metrics.namespace": "streamfold",
    # Progress lines, status/<query>.json and the bench's progress log, written in the JVM
    # (jvm/src/main/java/io/streamfold/status/ProgressListener.java), not by Python listeners, which get
    # every event converted over Py4J.
    "spark.sql.streaming.streamingQueryListeners": "io.streamfold.status.ProgressListener",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Python workers that skip re-reading pyspark's zips before every task (pipeline/pyspark_daemon.py).
    "spark.python.daemon.module": "pipeline.pyspark_daemon",
    # -Xss: stopping a query mid-batch makes Spark match a regex against the Python traceback, which
    # overflows the default thread stack on long tracebacks (a StackOverflowError in the log, SPARK-48717).
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG_CONFIG} -Xss8m {JIT} {GC}",
    "spark.executor.extraJavaOptions": JIT,
}


# Settings for a local master only. Checkpoints on the local file system without a child process per
# file (Hadoop without its native library runs `chmod` for each new file and `readlink` for each
# FileContext rename: dozens of forks of the Spark JVM per micro-batch; docs/decisions/spark-settings.md,
# "State and checkpoints").
# jvm/.../fs/ForklessLocalFileSystem sets permissions through java.nio; the FileSystem-based checkpoint
# manager renames with File.renameTo. Hadoop loads the file system class before spark.jars are on the
# classpath, hence the driver class path (the executors are in the driver's JVM under a local master;
# other masters keep Hadoop's defaults). Every jar of the folder goes there, not only ours: a class on the
# JVM's own class path cannot see spark.jars (the sink in streamfold-join.jar uses kafka-clients and the
# Postgres driver).
JOIN_JAR = "streamfold-join.jar"
LOCAL_MASTER = {
    "spark.hadoop.fs.file.impl": "io.streamfold.fs.ForklessLocalFileSystem",
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
    # Shuffle files of a local master never leave the machine (the page cache, mostly): compressing and
    # checksumming them is CPU for nothing.
    "spark.shuffle.compress": "false",
    "spark.shuffle.checksum.enabled": "false",
}


# Settings for Spark's real-time mode (`streamfold run --mode realtime`, docs/decisions/realtime-mode.md).
REALTIME = {
    # How long a pipelined shuffle holds a partly filled buffer (Spark's default 50 ms set the p50 of a
    # measured shuffle: 5 ms gave 3 ms). A core setting: the session's, never changed at run time.
    "spark.shuffle.streaming.networkBufferMaxWaitTimeMs": "5",
    # Real-time mode refuses checkpoint format v1 for a stateful query.
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
}
# A real-time batch runs all its stages at once, each task holding its slot for the whole batch: one per
# source partition (the events topic's and the CDC topic's) plus one per state partition of each stateful
# operator (one per table a file joins). local[*] on a small machine has too few; REALTIME_SOURCE_SLOTS
# threads cover topics of up to 12 partitions, beside 4 state partitions per join: local[16] for one table.
REALTIME_SOURCE_SLOTS = 12


def realtime_local_master(joins: int) -> str:
    """A local master with a task slot for every task of a real-time batch joining `joins` tables."""
    return f"local[{REALTIME_SOURCE_SLOTS + MIN_STATE_PARTITIONS * joins}]"


def realtime_conf(conf: dict[str, str], joins: int = 1) -> dict[str, str]:
    """The session's settings for real-time mode, under conf's own: REALTIME, and a local master with
    enough task slots for `joins` stateful operators unless one is chosen (--conf spark.master or
    STREAMFOLD_SPARK_MASTER)."""
    chosen = conf.get("spark.master") or config.lookup("STREAMFOLD_SPARK_MASTER", "")
    slots = {} if chosen else {"spark.master": realtime_local_master(joins)}
    return {**REALTIME, **slots, **conf}


# Settings for any other master (a cluster). Executors take the jars from spark.jars and the Python code
# from a zip the driver ships (code_zip); the Python environment (pyspark, boto3, pyarrow) is the workers'
# own: this checkout's venv on the native cluster, the pipeline image in compose. Spark's own worker daemon:
# ours imports `pipeline` before the shipped zip is on the path, so executors would run their installed
# copy of the code instead of the driver's.
CLUSTER = {
    "spark.executor.memory": "2g",
    "spark.python.daemon.module": "pyspark.daemon",
}
SHIPPED_PACKAGES = ("common", "pipeline")
LOOPBACK_MASTERS = ("spark://127.0.0.1:", "spark://localhost:")


def local_master(folder: Path) -> dict[str, str]:
    class_path = [str(folder / JOIN_JAR), *(j for j in jars_in(folder) if not j.endswith(JOIN_JAR))]
    where = {**LOCAL_MASTER, "spark.driver.extraClassPath": ":".join(class_path)}
    # The class-data archive `make setup` builds for this class path (pipeline/class_archive.py).
    if (archive := folder / class_archive.ARCHIVE).exists():
        options = f"{DEFAULTS['spark.driver.extraJavaOptions']} {class_archive.use(archive)}"
        where["spark.driver.extraJavaOptions"] = options
    return where


def jars_dir() -> Path:
    return Path(os.environ.get("STREAMFOLD_JARS", DEFAULT_JARS_DIR))


def jars_in(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.glob("*.jar"))


# The jars the job cannot start without (pom.xml's `spark` profile and the join operator), as glob patterns.
REQUIRED_JARS = (
    JOIN_JAR,
    "spark-sql-kafka-0-10_*.jar",
    "spark-token-provider-kafka-0-10_*.jar",
    "kafka-clients-*.jar",
    "commons-pool2-*.jar",
    "postgresql-*.jar",
)


class MissingJars(FileNotFoundError):
    """A jar the job needs is not in jars_dir(); the message names each and how to get them."""


def jars() -> list[str]:
    folder = jars_dir()
    missing = [pattern for pattern in REQUIRED_JARS if not any(folder.glob(pattern))]
    if missing:
        raise MissingJars(
            f"the Spark job's jars are not in {folder}: missing {', '.join(missing)}. `make setup` in a "
            "streamfold checkout builds them into its lib/spark; set STREAMFOLD_JARS to that folder when "
            "streamfold runs from elsewhere (a `pip install`)"
        )
    return jars_in(folder)


def master(conf: dict[str, str] | None) -> str:
    chosen = (conf or {}).get("spark.master") or config.lookup("STREAMFOLD_SPARK_MASTER", "")
    return chosen or DEFAULTS["spark.master"]


def settings(conf: dict[str, str] | None = None) -> dict[str, str]:
    """The session's Spark settings: DEFAULTS, then LOCAL_MASTER or CLUSTER, then conf's spark.*."""
    where = local_master(jars_dir()) if master(conf).startswith("local") else {**CLUSTER, **executor_env()}
    if master(conf).startswith(LOOPBACK_MASTERS):  # the native cluster: executors call back on loopback
        where = {**where, "spark.driver.host": "127.0.0.1"}
    chosen = {k: v for k, v in (conf or {}).items() if k.startswith("spark.")}
    return {**DEFAULTS, **where, **chosen, "spark.master": master(conf)}


def executor_env() -> dict[str, str]:
    """The driver's retry budget for the executors' Kinesis reads too (their workers may say otherwise)."""
    budget = os.environ.get("STREAMFOLD_SINK_RETRY_S")
    return {"spark.executorEnv.STREAMFOLD_SINK_RETRY_S": budget} if budget else {}


def private_temp() -> Path:
    """A fresh folder only its owner may enter (mkdtemp's 0700), removed at exit, for the session's
    temporary files: Spark's local dir (shuffle files hold events with their profile columns) and the
    driver JVM's java.io.tmpdir, both /tmp by default."""
    root = Path(tempfile.mkdtemp(prefix="streamfold-spark-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    for folder in ("local", "tmp"):
        (root / folder).mkdir(mode=0o700)
    return root


def with_private_temp(chosen: dict[str, str], root: Path) -> dict[str, str]:
    """`chosen` with its local dir (unless chosen) and the driver's temporary folder under `root`."""
    options = f"{chosen.get('spark.driver.extraJavaOptions', '')} -Djava.io.tmpdir={root / 'tmp'}".strip()
    return {"spark.local.dir": str(root / "local"), **chosen, "spark.driver.extraJavaOptions": options}


def code_zip(folder: Path) -> Path:
    """The driver's Python code, as the zip executors put on their path (SparkContext.addPyFile)."""
    root = Path(__file__).resolve().parents[1]
    target = folder / "streamfold-code.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in SHIPPED_PACKAGES:
            for source in sorted((root / package).rglob("*.py")):
                archive.write(source, source.relative_to(root))
    return target


def session(app_name: str, conf: dict[str, str] | None = None) -> SparkSession:
    # Python workers must use this interpreter (the venv with pandas and pyarrow), not the system one.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master(conf).startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # everything local stays on loopback
    temp = private_temp()
    builder = SparkSession.builder.appName(app_name).config("spark.jars", ",".join(jars()))
    for key, value in with_private_temp(settings(conf), temp).items():
        builder = builder.config(key, value)
    # The JVM, and the Python workers it forks, create their files for their owner only, whatever the
    # caller's umask (the bench's runner and the unit tests keep the default 022).
    previous = os.umask(config.PRIVATE_UMASK)
    try:
        spark = builder.getOrCreate()
    finally:
        os.umask(previous)
    if not master(conf).startswith("local"):
        spark.sparkContext.addPyFile(str(code_zip(temp / "tmp")))
    return spark


EXECUTORS_WAIT_S = 60.0  # for a cluster's first executor, as long as a worker takes to start one
EXECUTORS_SETTLE_S = 2.0  # the executors' cores have stopped growing when unchanged this long


def state_partitions(spark: SparkSession) -> int:
    """The join's state partitions for a new checkpoint: the cores Spark has, at least MIN_STATE_PARTITIONS.
    One task per state partition runs the join, so fewer partitions than cores would leave cores idle
    for good (local[*] on a bigger machine, a cluster of more workers)."""
    return max(MIN_STATE_PARTITIONS, cores(spark))


def cores(spark: SparkSession) -> int:
    """The task slots Spark has: a local master's threads, or a cluster's executor cores once its executors
    have registered (they start beside the driver; their cores are counted when they stop growing)."""
    context = spark.sparkContext
    if (context.master or "").startswith("local"):
        return context.defaultParallelism
    deadline = time.monotonic() + EXECUTORS_WAIT_S
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        # The block managers: the driver's and one per executor.
        executors = context._jsc.sc().getExecutorMemoryStatus().size() - 1  # noqa: SLF001 - no Python API
        slots = context.defaultParallelism if executors > 0 else 0
        if slots != seen:
            seen, since = slots, time.monotonic()
        elif slots and time.monotonic() - since >= EXECUTORS_SETTLE_S:
            break
        time.sleep(0.2)
    return max(seen, 1)
