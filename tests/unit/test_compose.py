"""The compose stack, checked statically (tests/compose runs it on a Docker Engine).

Debian's docker-compose validates the files and renders the model the engine would run; that model is
then held to the rules the two stacks share: one source for versions (pom.xml, requirements.txt,
package-lock.json, Debian bookworm), for names (common/names.py) and for settings
(common/config.py).
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

from common import config, names
from pipeline.spark import SHIPPED_PACKAGES
from stack import spark
from stack.home import PORT_OFFSETS, SECRET_NAMES, Stack
from stack.postgres import MAX_SLOT_WAL_KEEP_SIZE, PG_HBA
from streamfold import compose_secrets
from tests.support import containers

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose"
FILESETS = {
    "base": ("docker-compose.yml",),
    "cluster": ("docker-compose.yml", "docker-compose.cluster.yml"),
}
DOCKERFILE = COMPOSE / "Dockerfile"
DOCKERFILES = sorted(COMPOSE.glob("Dockerfile*"))
# Python code that runs inside compose services: what the pipeline image copies. The launchers run on
# the host, never in a service: the local stack's (stack/) and the containers fixture (tests/support/).
CODE_DIRS = ("common", "streamfold", "pipeline", "connectors", "db")
HOST_ONLY = ("stack", "tests")
# The Dockerfile's service targets, and the stages only the builds use.
TARGETS = {"postgres", "kafka", "kinesis", "registry", "pipeline"}
BUILD_STAGES = {"build", "jars", "venv", "join", "jdk", "npm"}
# Services from the pipeline image: which run streamfold's commands, which run its executors (the cluster
# file's workers, named as the native stack's: stack/spark.py worker_names), which only schedule.
PIPELINE_IMAGE = "streamfold/pipeline"
CODE_SERVICES = {"setup", "pipeline"}
WORKERS = spark.worker_names(2)
EXECUTOR_SERVICES = set(WORKERS)
SCHEDULER_ONLY = {"spark-master"}
# Read by the driver on a cluster only (the cluster file's pipeline gets it; local mode when unset).
CLUSTER_DRIVER_VARS = {"STREAMFOLD_SPARK_MASTER"}
# What executors read: the Kinesis reader's endpoint, retry budget and AWS settings, and the home whose
# stack.env holds them natively (common/config.py aws_settings, pipeline/retry.py). The sinks get their
# DSN and retry budget from the driver.
EXECUTOR_VARS = {
    "STREAMFOLD_HOME",
    "STREAMFOLD_KINESIS_ENDPOINT",
    "STREAMFOLD_SINK_RETRY_S",
    *config.AWS_VARS,
}
# The cluster file's addresses: spark-master's RPC and UI ports, each worker's RPC and UI ports, and
# the work folder inside a worker's container.
MASTER_PORT, MASTER_UI_PORT = 7077, 8080
WORKER_PORT, WORKER_UI_PORT = 7078, 8081
WORKER_WORK_DIR = "/tmp/spark-work"
# What the native workers' environment has (stack/spark.py) that the image gives otherwise: pyspark's
# spark-class finds its SPARK_HOME, the image's java is on PATH, logs go to the console (docker logs),
# and each worker binds the address of its --host instead of loopback.
# The temporary folders too: a native worker's would be the machine's shared /tmp, a container's is its own.
NATIVE_ONLY_WORKER_ENV = {
    "SPARK_HOME",
    "JAVA_HOME",
    "SPARK_LOG_DIR",
    "SPARK_LOCAL_IP",
    "SPARK_LOCAL_DIRS",
    "JAVA_TOOL_OPTIONS",
    "TMPDIR",
}
USEFUL_CONDITIONS = {"service_healthy", "service_completed_successfully"}
VAR = re.compile(r"\$\{(\w+)\}")


def docker_compose(fileset: str, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is missing: apt-get install --no-install-recommends docker-compose"
    files = [arg for name in FILESETS[fileset] for arg in ("-f", str(COMPOSE / name))]
    return subprocess.run([binary, *files, *args], capture_output=True, text=True, timeout=120)


@functools.cache
def model(fileset: str) -> dict[str, Any]:
    """The merged, normalised model `docker-compose config` renders (the files as the engine sees them)."""
    result = docker_compose(fileset, "config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def services(fileset: str) -> dict[str, dict[str, Any]]:
    return model(fileset)["services"]


def raw_services(fileset: str) -> dict[str, dict[str, Any]]:
    """The services as written, ${VAR}s intact (docker-compose 1.x cannot render that), later files
    overriding earlier ones key by key."""
    merged: dict[str, dict[str, Any]] = {}
    for name in FILESETS[fileset]:
        for service, spec in yaml.safe_load((COMPOSE / name).read_text())["services"].items():
            merged.setdefault(service, {}).update(spec)
    return merged


@functools.cache
def dotenv() -> dict[str, str]:
    return config.read_env_file(COMPOSE / ".env")


def variable(text: str) -> str:
    """The name of the first ${VAR} in text, '' if there is none."""
    match = VAR.search(text)
    return match.group(1) if match else ""


def code_variables(folders: tuple[str, ...] = CODE_DIRS) -> set[str]:
    """Every STREAMFOLD_* variable named in the Python code that services run (or in `folders`)."""
    found: set[str] = set()
    for folder in folders:
        for path in (REPO / folder).rglob("*.py"):
            found |= set(re.findall(r"\bSTREAMFOLD_[A-Z][A-Z0-9_]*\b", path.read_text()))
    return found


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    lines = [line for line in dockerfile.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    pairs = [line.strip().split(None, 1) for line in joined.splitlines() if line.strip()]
    return [(pair[0].upper(), pair[1] if len(pair) > 1 else "") for pair in pairs]


def copied_sources(dockerfile: Path) -> list[str]:
    """Sources of the COPY instructions that read the build context (not another stage)."""
    sources = []
    for instruction, args in instructions(dockerfile):
        words = args.split()
        if instruction == "COPY" and not any(w.startswith("--from=") for w in words):
            sources += [w for w in words[:-1] if not w.startswith("--")]
    return sources


def strings(node: Any) -> list[str]:
    """Every key and scalar of a parsed YAML tree, as text."""
    if isinstance(node, dict):
        return [text for key, value in node.items() for text in (str(key), *strings(value))]
    if isinstance(node, list):
        return [text for item in node for text in strings(item)]
    return [str(node)]


def published_host_ip(port: Any) -> str:
    if isinstance(port, dict):  # long syntax (compose v2 renders this)
        return str(port.get("host_ip", ""))
    parts = str(port).split(":")
    return parts[0] if len(parts) == 3 else ""


def one_shot(svcs: dict[str, dict[str, Any]]) -> set[str]:
    """Services others wait for to *complete*: they exit by design."""
    return {
        dep
        for svc in svcs.values()
        for dep, spec in svc.get("depends_on", {}).items()
        if spec.get("condition") == "service_completed_successfully"
    }


def pom_profiles() -> set[str]:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    return {
        p.text or "" for p in ET.parse(REPO / "pom.xml").getroot().findall("m:profiles/m:profile/m:id", ns)
    }


# ---------------------------------------------------------------- (1) the files are valid


@pytest.mark.parametrize("fileset", FILESETS)
def test_docker_compose_accepts_the_files_with_every_variable_set(fileset: str) -> None:
    result = docker_compose(fileset, "config", "-q")
    assert result.returncode == 0, result.stderr
    # An unset ${VAR} is only a warning ("defaulting to a blank string"), and a blank image tag.
    assert "is not set" not in result.stderr, result.stderr


# ---------------------------------------------------------------- (2) one set of settings


@pytest.mark.parametrize("fileset", FILESETS)
def test_services_get_no_setting_the_code_does_not_read(fileset: str) -> None:
    for name, svc in services(fileset).items():
        given = {key for key in svc.get("environment", {}) if key.startswith("STREAMFOLD_")}
        stale = given - code_variables()
        assert not stale, f"{name} gets {sorted(stale)}, which no streamfold code reads"


@functools.cache
def generated() -> dict[Path, dict[str, str]]:
    """The files the `secrets` service writes (one set of passwords), as settings."""
    texts = compose_secrets.files(compose_secrets.generate())
    return {
        path: dict(line.removeprefix("export ").split("=", 1) for line in text.splitlines())
        for path, text in texts.items()
        if path.suffix == ".env"
    }


def env_file_settings(svc: dict[str, Any]) -> dict[str, str]:
    """What a service reads from its STREAMFOLD_ENV_FILE, which must sit in a volume it mounts."""
    path = Path(svc["environment"][config.ENV_FILE_VAR])
    mounts = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
    assert str(path.parent) in mounts, f"{path} is in no volume the service mounts"
    return generated()[path]


@pytest.mark.parametrize("fileset", FILESETS)
def test_every_service_that_runs_streamfold_code_gets_every_setting(fileset: str) -> None:
    svcs = services(fileset)
    from_pipeline_image = {n for n, s in svcs.items() if s.get("image", "").startswith(PIPELINE_IMAGE + ":")}
    classified = CODE_SERVICES | EXECUTOR_SERVICES | SCHEDULER_ONLY | {"secrets"}
    assert from_pipeline_image <= classified, "classify new services"
    # The superuser's and the broker's passwords are only generated by streamfold code (the DSN holds the
    # former); STREAMFOLD_ENV_FILE gives the DSN and the other passwords.
    generated_only = {compose_secrets.SUPERUSER_PASSWORD, compose_secrets.BROKER_PASSWORD}
    wanted = code_variables() - CLUSTER_DRIVER_VARS - generated_only | set(config.AWS_VARS)
    for name in from_pipeline_image & CODE_SERVICES:
        given = set(svcs[name].get("environment", {})) | set(env_file_settings(svcs[name]))
        missing = wanted - given
        assert not missing, f"{name} lacks {sorted(missing)}"


def test_no_password_is_committed_in_the_compose_files() -> None:
    committed = "\n".join((COMPOSE / name).read_text() for name in (".env", *FILESETS["cluster"]))
    for name in (*compose_secrets.PASSWORD_NAMES, "POSTGRES_PASSWORD"):
        assert not re.search(rf"^\s*{name}\s*[:=]", committed, re.MULTILINE), f"{name} is set in compose/"
    # Each password is generated, once per stack, and reaches only the files of those who use it.
    job = generated()[compose_secrets.JOB_DIR / "pipeline.env"]
    assert compose_secrets.SUPERUSER_PASSWORD not in job and "postgres:5432" in job["STREAMFOLD_PG_DSN"]


def test_a_later_start_keeps_the_passwords_and_adds_what_a_new_version_needs(tmp_path: Path) -> None:
    secrets_dir, job_dir = tmp_path / "secrets", tmp_path / "job"
    secrets_dir.mkdir(), job_dir.mkdir()
    assert compose_secrets.write(secrets_dir, job_dir)
    first = (secrets_dir / "secrets.env").read_text()
    assert not compose_secrets.write(secrets_dir, job_dir)
    # Volumes from before the registry: its password (in every file) and settings file are missing.
    registry_line = f"export {config.REGISTRY_PASSWORD_VAR}="
    for path in [*secrets_dir.glob("*.env"), *job_dir.glob("*.env")]:
        lines = path.read_text().splitlines(True)
        path.write_text("".join(line for line in lines if not line.startswith(registry_line)))
    older = (secrets_dir / "secrets.env").read_text()
    (secrets_dir / "registry.properties").unlink()
    assert compose_secrets.write(secrets_dir, job_dir)
    now = config.parse_env((secrets_dir / "secrets.env").read_text())
    before = config.parse_env(older)
    assert {name: now[name] for name in before} == before
    assert now[config.REGISTRY_PASSWORD_VAR] and now[config.REGISTRY_PASSWORD_VAR] not in first
    props = (secrets_dir / "registry.properties").read_text()
    assert f"users.{config.CLIENT_USER}={now[config.REGISTRY_PASSWORD_VAR]}\n" in props
    broker = config.parse_env((secrets_dir / "kafka.env").read_text())[compose_secrets.BROKER_PASSWORD]
    assert broker in (secrets_dir / "kafka.env").read_text() and broker not in now.values()
    # A volume whose Connect file predates the Avro converter's login (cdc.format avro) gets it.
    connect = secrets_dir / "connect.env"
    connect.write_text(
        "".join(line for line in connect.read_text().splitlines(True) if registry_line not in line)
    )
    assert compose_secrets.write(secrets_dir, job_dir)
    assert (
        config.parse_env(connect.read_text())[config.REGISTRY_PASSWORD_VAR]
        == now[config.REGISTRY_PASSWORD_VAR]
    )
    assert config.parse_env((secrets_dir / "secrets.env").read_text()) == now


@pytest.mark.parametrize("fileset", FILESETS)
def test_only_the_cluster_files_driver_gets_the_master(fileset: str) -> None:
    """The job submits to spark-master through STREAMFOLD_SPARK_MASTER, as on the native cluster."""
    svcs = services(fileset)
    given = {
        n: s["environment"]["STREAMFOLD_SPARK_MASTER"]
        for n, s in svcs.items()
        if CLUSTER_DRIVER_VARS & set(s.get("environment", {}))
    }
    if fileset == "base":
        assert given == {}
        return
    assert given == {"pipeline": f"spark://{svcs['spark-master']['hostname']}:{MASTER_PORT}"}
    assert code_variables(("pipeline",)) >= CLUSTER_DRIVER_VARS
    # The base file's command, plus the driver's address in the compose network: no spark.master there.
    base = services("base")["pipeline"]["command"]
    driver = ["--conf", "spark.driver.host=pipeline", "--conf", "spark.driver.bindAddress=0.0.0.0"]
    assert svcs["pipeline"]["command"] == base + driver
    assert svcs["pipeline"]["hostname"] == "pipeline"


def test_the_cluster_file_runs_the_native_clusters_commands() -> None:
    """stack/spark.py's master_command and worker_command with the compose hosts and ports: the same
    classes, cores, memory and options as `streamfold stack up --spark-workers 2`."""
    svcs = services("cluster")
    master = svcs["spark-master"]
    assert master["command"] == spark.master_command(master["hostname"], MASTER_PORT, MASTER_UI_PORT)
    assert str(MASTER_UI_PORT) in " ".join(master["healthcheck"]["test"])
    url = f"spark://{master['hostname']}:{MASTER_PORT}"
    assert sorted(n for n in svcs if n.startswith("spark-worker")) == WORKERS
    for name in WORKERS:
        worker = svcs[name]
        assert worker["hostname"] == name
        assert worker["command"] == spark.worker_command(
            url, name, WORKER_WORK_DIR, WORKER_PORT, WORKER_UI_PORT
        )
        assert f"localhost:{WORKER_UI_PORT}/" in " ".join(worker["healthcheck"]["test"])
        assert worker["depends_on"] == {"spark-master": {"condition": "service_healthy"}}
    assert set(svcs["pipeline"]["depends_on"]) == {"setup", *WORKERS}


def native_worker(home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, str]]:
    """The command and environment `streamfold stack up --spark-workers N` starts a worker with."""
    stack = Stack(home=home, ports=dict.fromkeys(PORT_OFFSETS, 1), secrets=dict.fromkeys(SECRET_NAMES, "x"))
    launched: dict[str, Any] = {}

    def spawn(self: spark.SparkWorker, cmd: list[str], out: Path, env: dict[str, str] | None = None) -> None:
        launched.update(cmd=list(cmd), env=dict(env or {}))
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text("1\n")

    monkeypatch.setattr(spark.SparkWorker, "_spawn_recorded", spawn)
    monkeypatch.setattr(spark, "java_binary", lambda: "/usr/lib/jvm/java-17/bin/java")
    spark.SparkWorker(stack, 1).launch()
    return launched["cmd"], launched["env"]


def flags(command: list[str]) -> dict[str, str]:
    """A Spark daemon's options but its addresses and folders: what both deployments must share."""
    where = {"--host", "--port", "--webui-port", "--work-dir"}
    options = command[command.index(spark.WORKER_CLASS) + 2 :]
    return {k: v for k, v in zip(options[::2], options[1::2], strict=True) if k not in where}


def image_env(target: str) -> dict[str, str]:
    """The ENV a Dockerfile target sets."""
    pairs = [
        word.split("=", 1)
        for instruction, args in stages(DOCKERFILE)[target]
        if instruction == "ENV"
        for word in args.split()
    ]
    return dict((key, value) for key, value in pairs)


def test_workers_get_what_the_native_workers_get(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    command, native = native_worker(tmp_path, monkeypatch)
    assert set(native) >= NATIVE_ONLY_WORKER_ENV
    svcs = services("cluster")
    image = image_env("pipeline")
    for name in WORKERS:
        env = svcs[name]["environment"]
        assert flags(svcs[name]["command"]) == flags(command) == {"--cores": "1", "--memory": "3g"}
        missing = set(native) - set(env) - set(image) - NATIVE_ONLY_WORKER_ENV
        assert not missing, f"{name} lacks {sorted(missing)}"
        assert env["SPARK_WORKER_OPTS"] == native["SPARK_WORKER_OPTS"] == spark.WORKER_OPTS
    # Python workers run the driver's PYSPARK_PYTHON: the venv whose bin/ the image puts first on PATH
    # (pyspark, pandas, pyarrow), for the driver and the workers alike.
    assert "PYSPARK_PYTHON" in native and "PYSPARK_PYTHON" not in svcs["pipeline"]["environment"]
    assert image["PYSPARK_PYTHON"] == image["PATH"].split(":")[0] + "/python"


def test_workers_get_what_executors_read_from_the_drivers_settings() -> None:
    svcs = services("cluster")
    driver = svcs["pipeline"]["environment"]
    # Each variable is named in the code executors get (the zip the driver ships).
    assert EXECUTOR_VARS - set(config.AWS_VARS) <= code_variables(SHIPPED_PACKAGES)
    for name in WORKERS:
        env = svcs[name]["environment"]
        ours = {k for k in env if k.startswith(("STREAMFOLD_", "AWS_"))}
        assert ours == EXECUTOR_VARS, f"{name}: {sorted(ours ^ EXECUTOR_VARS)}"
        assert {k: env[k] for k in ours} == {k: driver[k] for k in ours}, name


def test_the_driver_and_the_workers_share_the_checkpoint_volume() -> None:
    """Executors write the state store's checkpoint files under the driver's STREAMFOLD_HOME."""
    svcs = services("cluster")
    home = svcs["pipeline"]["environment"]["STREAMFOLD_HOME"]
    mounts = {}
    for name in ["pipeline", *WORKERS]:
        assert svcs[name]["environment"]["STREAMFOLD_HOME"] == home, name
        mounts[name] = {v.split(":")[1]: v.split(":")[0] for v in svcs[name]["volumes"]}.get(home)
    assert len(set(mounts.values())) == 1 and mounts["pipeline"] in model("cluster")["volumes"], mounts


def test_the_job_connects_as_the_writer_role_and_setup_as_the_superuser() -> None:
    svcs = services("base")
    job, admin = env_file_settings(svcs["pipeline"]), env_file_settings(svcs["setup"])
    pipeline, setup = conninfo_to_dict(job["STREAMFOLD_PG_DSN"]), conninfo_to_dict(admin["STREAMFOLD_PG_DSN"])
    assert pipeline["user"] == config.WRITER_ROLE
    assert pipeline["password"] == job["STREAMFOLD_WRITER_PASSWORD"]
    assert setup["user"] == svcs["postgres"]["environment"]["POSTGRES_USER"]
    person = generated()[compose_secrets.SECRETS_DIR / "secrets.env"]
    assert setup["password"] == person[compose_secrets.SUPERUSER_PASSWORD]
    # The job's container mounts only its own volume: no superuser password in it.
    assert all("/run/streamfold:" not in v for v in svcs["pipeline"]["volumes"])
    assert {k: setup[k] for k in ("host", "port", "dbname")} == {
        k: pipeline[k] for k in ("host", "port", "dbname")
    }
    assert setup["dbname"] == svcs["postgres"]["environment"]["POSTGRES_DB"]


# ---------------------------------------------------------------- (3) one source of names


def pipeline_names() -> set[str]:
    """Topic, stream, connector, slot, publication and table names: common/names.py and the
    literal (non-template) names in connectors/*.json."""
    tree = ast.parse((REPO / "common" / "names.py").read_text())
    constants = [
        n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
    ]
    suffixes = ("_TOPIC", "_STREAM", "_NAME", "_TABLE", "_PREFIX")
    found = {getattr(names, c) for c in constants if c.endswith(suffixes)}
    found |= {topic for topic, _ in names.PIPELINE_TOPICS}
    for path in (REPO / "connectors").glob("*.json"):
        listed = json.loads(path.read_text()).get("table.include.list", "")
        found |= {name for name in listed.split(",") if name and "$" not in name}
    return found


def test_compose_names_no_topic_stream_or_connector() -> None:
    wanted = pipeline_names()
    assert names.CONNECTOR_NAME in wanted and names.CLICKS_TOPIC in wanted
    texts = [text for fileset in FILESETS for text in strings(model(fileset))]
    texts += [
        line
        for line in (COMPOSE / "connect-distributed.properties").read_text().splitlines()
        if not line.startswith("#")
    ]
    texts += [args for dockerfile in DOCKERFILES for _, args in instructions(dockerfile)]
    tokens = {token for text in texts for token in re.split(r"[^A-Za-z0-9_.-]+", text)}
    assert not tokens & wanted, f"use common/names.py, not literals: {sorted(tokens & wanted)}"


# ---------------------------------------------------------------- (4) the images build from the repo's files


def test_images_are_built_from_the_repository_root() -> None:
    svcs = services("cluster")
    built = {n: s["build"] for n, s in svcs.items() if "build" in s}
    # Every image is ours and built here, never pulled from a registry (connect runs kafka's image).
    assert all(s["image"].startswith("streamfold/") for s in svcs.values())
    assert {s["image"] for s in svcs.values()} == {svcs[n]["image"] for n in built}
    for name, build in built.items():
        assert Path(build["context"]) == REPO, name
        assert REPO / build["dockerfile"] == DOCKERFILE, name
        assert (
            build["target"] in TARGETS
            and svcs[name]["image"].split(":")[0] == f"streamfold/{build['target']}"
        )
    assert DOCKERFILES == [DOCKERFILE]


def stages(dockerfile: Path) -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions, by stage name."""
    found: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for instruction, args in instructions(dockerfile):
        if instruction == "FROM":
            current = found.setdefault(args.split()[-1], [])
        current.append((instruction, args))
    return found


def runs(stage: list[tuple[str, str]]) -> list[str]:
    return [args for instruction, args in stage if instruction == "RUN"]


def test_images_install_from_the_version_files_as_the_bootstrap_does() -> None:
    by_stage = stages(DOCKERFILE)
    assert set(by_stage) == TARGETS | BUILD_STAGES
    sources = copied_sources(DOCKERFILE)
    assert {"requirements.txt", "pom.xml", "package.json", "package-lock.json", "jvm/"} <= set(sources)
    bootstrap = (REPO / "scripts" / "bootstrap.sh").read_text()
    jars = " ".join(runs(by_stage["jars"]))
    for profile in ("kafka", "debezium", "spark"):
        assert f"copy_jars {profile} " in bootstrap
        assert re.search(
            rf"\bmvn -q -P {profile} dependency:copy-dependencies -DincludeScope=runtime\b", jars
        )
    join = " ".join(runs(by_stage["join"]))
    assert "mvn -q -P join package" in join and "mvn -q -P join package" in bootstrap
    # the operator compiles against the venv's pyspark jars, named by the same script in both
    assert "scripts/pyspark_classpath.py" in join and "scripts/pyspark_classpath.py" in bootstrap
    assert stages(DOCKERFILE)["join"][0] == ("FROM", "venv AS join")
    assert any(re.search(r"\bpip install -q -r /tmp/requirements\.txt\b", r) for r in runs(by_stage["venv"]))
    assert any(r.startswith("npm ci ") for r in runs(by_stage["npm"])) and "npm ci " in bootstrap


def test_service_images_start_again_from_the_base_and_copy_only_build_outputs() -> None:
    """The toolchains and compose/build-ca's extra CAs stay in the build stages."""
    for target in TARGETS:
        stage = stages(DOCKERFILE)[target]
        assert stage[0] == ("FROM", f"${{BASE_IMAGE}} AS {target}"), target
        copies = [args for instruction, args in stage if instruction == "COPY"]
        assert not [c for c in copies if "build-ca" in c], target
        for args in copies:
            source = re.search(r"--from=(\w+)", args)
            assert source is None or source.group(1) in BUILD_STAGES, f"{target}: COPY {args}"
    assert "compose/build-ca/" in copied_sources(DOCKERFILE)
    assert [i for i, a in stages(DOCKERFILE)["build"] if i == "COPY"] == ["COPY"]


def test_postgres_has_logical_decoding_and_no_replication_line() -> None:
    entrypoint = (COMPOSE / "postgres-entrypoint.sh").read_text()
    assert "wal_level=logical" in entrypoint
    hba = entrypoint.split("<<HBA\n", 1)[1].split("\nHBA\n", 1)[0]
    rules = [line.split() for line in hba.splitlines() if line and not line.startswith("#")]
    assert rules and all(rule[1] != "replication" for rule in rules)
    # As in the local stack: the Debezium role reaches its own database only, never over the socket.
    local = [line.split() for line in PG_HBA.splitlines() if line and not line.startswith("#")]
    debezium = config.DEBEZIUM_ROLE
    for stack_rules in (local, rules):
        mine = [r for r in stack_rules if r[2] == debezium]
        assert [r[1] for r in mine] == ["$db" if stack_rules is rules else "streamfold", "all", "all"]
        assert mine[0][-1] == "scram-sha-256" and mine[1][-1] == mine[2][-1] == "reject"
        assert stack_rules.index(mine[-1]) < min(i for i, r in enumerate(stack_rules) if r[2] == "all")


def test_postgres_caps_the_wal_a_slot_holds_as_the_local_stack_does() -> None:
    entrypoint = (COMPOSE / "postgres-entrypoint.sh").read_text()
    assert f"-c max_slot_wal_keep_size={MAX_SLOT_WAL_KEEP_SIZE}" in entrypoint


def test_maven_profiles_used_by_the_images_exist() -> None:
    used = {m for _, args in instructions(DOCKERFILE) for m in re.findall(r"-P ([\w-]+)", args)}
    assert (
        used == {"kafka", "debezium", "apicurio-converter", "spark", "join", "registry"}
        and used <= pom_profiles()
    )


def test_requirements_and_pom_exist_once() -> None:
    skip = {".git", ".venv", "node_modules", "lib", ".streamfold"}
    copies = [
        p.relative_to(REPO)
        for p in REPO.rglob("*")
        if p.name in {"requirements.txt", "pom.xml"} and not skip & set(p.relative_to(REPO).parts)
    ]
    # jvm-kstreams/pom.xml builds the bench's Kafka Streams contender, in no image; its Kafka is held to
    # pom.xml's by tests/unit/test_bench.py.
    assert sorted(map(str, copies)) == [
        "jvm-kstreams/pom.xml",
        "pom.xml",
        "requirements.txt",
    ]


def test_dockerignore_sends_what_the_images_copy_and_no_secrets() -> None:
    rules = [
        r.strip() for r in (REPO / ".dockerignore").read_text().splitlines() if r.strip() and r[0] != "#"
    ]
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    for source in copied_sources(DOCKERFILE):
        assert {source.split("/")[0], source.rstrip("/")} & allowed, f"the Dockerfile copies {source}"
    assert "compose/.env" in rules[rules.index("!compose") :]
    assert not allowed & set(HOST_ONLY), "the host's launchers are no part of any image"
    assert not list(COMPOSE.rglob("*.py")), "compose/ holds the Docker files only"


def test_the_pipeline_image_copies_the_code_services_run_and_no_launcher() -> None:
    stage = stages(DOCKERFILE)["pipeline"]
    copies = [args.split() for i, args in stage if i == "COPY" and "--from=" not in args]
    copied = {source.split("/")[0] for words in copies for source in words[:-1]}
    assert copied == {"pyproject.toml", "streamfold.yaml", *CODE_DIRS}


def test_mounted_files_exist() -> None:
    for name, svc in services("cluster").items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            assert not source.startswith("/") or Path(source).exists(), f"{name} mounts missing {source}"


# ---------------------------------------------------------------- (5) operations rules


@pytest.mark.parametrize("fileset", FILESETS)
def test_long_running_services_have_healthchecks(fileset: str) -> None:
    svcs = services(fileset)
    assert one_shot(svcs) == {"secrets", "setup"}
    assert svcs["setup"]["restart"] == svcs["secrets"]["restart"] == "no"
    for name, svc in svcs.items():
        if name not in one_shot(svcs):
            check = svc.get("healthcheck", {})
            assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"


@pytest.mark.parametrize("fileset", FILESETS)
def test_every_dependency_waits_for_health_or_completion(fileset: str) -> None:
    for name, svc in services(fileset).items():
        for dep, spec in svc.get("depends_on", {}).items():
            assert spec.get("condition") in USEFUL_CONDITIONS, f"{name} -> {dep}: {spec}"


@pytest.mark.parametrize("fileset", FILESETS)
def test_ports_are_published_on_loopback_only(fileset: str) -> None:
    published = [(n, p) for n, s in services(fileset).items() for p in s.get("ports", [])]
    assert published
    for name, port in published:
        assert published_host_ip(port) == "127.0.0.1", f"{name}: {port}"


@pytest.mark.parametrize("fileset", FILESETS)
def test_image_tags_and_base_images_are_env_variables(fileset: str) -> None:
    env = dotenv()
    for name, svc in raw_services(fileset).items():
        assert re.fullmatch(r"[\w./-]+:\$\{\w+\}", svc["image"]), f"{name}: {svc['image']}"
        assert variable(svc["image"]) in env, f"{name}: {svc['image']}"
        for arg, value in svc.get("build", {}).get("args", {}).items():
            assert VAR.fullmatch(str(value)) and variable(str(value)) in env, f"{name}: {arg}"
    # Versions live in pom.xml, requirements.txt and package-lock.json, not in a second place here.
    assert not [k for k in env if k.endswith("_VERSION")]


def test_every_image_builds_from_the_base_image_build_arg() -> None:
    steps = instructions(DOCKERFILE)
    # The ARG before the first FROM, with the registry's Debian 12 as its default.
    assert steps[0] == ("ARG", "BASE_IMAGE=debian:bookworm-slim")
    assert dotenv()["BASE_IMAGE"] == "debian:bookworm-slim"
    named = {args.split()[-1] for i, args in steps if i == "FROM"}
    for image in [args.split()[0] for i, args in steps if i == "FROM"]:
        assert image == "${BASE_IMAGE}" or image in named, f"FROM {image}"


def test_the_project_version_tags_the_images() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert dotenv()["STREAMFOLD_IMAGE_TAG"] == project


# ---------------------------------------------------------------- tests/support/containers.py


def test_containers_start_the_infrastructure_the_local_stack_runs() -> None:
    svcs = services("base")
    assert set(containers.INFRA_SERVICES) == set(svcs) - CODE_SERVICES - {"secrets"}  # a dependency of all
    ports = {variable(str(p)) for n in containers.INFRA_SERVICES for p in raw_services("base")[n]["ports"]}
    assert ports == set(containers.PORT_VARS)


def test_containers_export_what_the_local_stack_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = containers.isolated_settings(pid=4242)
    env = containers.stack_env(settings, dict.fromkeys(compose_secrets.PASSWORD_NAMES, "x"), tmp_path)
    local = Stack(
        home=tmp_path,
        ports=dict.fromkeys(PORT_OFFSETS, 1),
        secrets=dict.fromkeys(SECRET_NAMES, "x"),
    ).env()
    assert set(local) <= set(env)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    loaded = config.load()
    assert loaded.kafka_bootstrap == f"127.0.0.1:{settings['KAFKA_HOST_PORT']}"
    assert conninfo_to_dict(loaded.writer_dsn)["port"] == settings["POSTGRES_HOST_PORT"]
    assert len({settings[v] for v in containers.PORT_VARS}) == len(containers.PORT_VARS)
    assert settings["COMPOSE_PROJECT_NAME"] != dotenv()["COMPOSE_PROJECT_NAME"]
