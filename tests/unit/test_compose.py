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
from stack.home import PORT_OFFSETS, SECRET_NAMES, Stack
from stack.postgres import PG_HBA
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
TARGETS = {"postgres", "kafka", "kinesis", "pipeline"}
BUILD_STAGES = {"build", "jars", "venv", "npm"}
# Services from the pipeline image: which run streamfold code (spark-master only schedules).
PIPELINE_IMAGE = "streamfold/pipeline"
CODE_SERVICES = {"setup", "pipeline", "spark-worker"}
SCHEDULER_ONLY = {"spark-master"}
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


def code_variables() -> set[str]:
    """Every STREAMFOLD_* variable named in the Python code that services run."""
    found: set[str] = set()
    for folder in CODE_DIRS:
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


@pytest.mark.parametrize("fileset", FILESETS)
def test_every_service_that_runs_streamfold_code_gets_every_setting(fileset: str) -> None:
    svcs = services(fileset)
    from_pipeline_image = {n for n, s in svcs.items() if s.get("image", "").startswith(PIPELINE_IMAGE + ":")}
    assert from_pipeline_image <= CODE_SERVICES | SCHEDULER_ONLY, "classify new services in this test"
    wanted = code_variables() | set(config.AWS_VARS)
    for name in from_pipeline_image & CODE_SERVICES:
        missing = wanted - set(svcs[name].get("environment", {}))
        assert not missing, f"{name} lacks {sorted(missing)}"


def test_spark_executors_get_the_drivers_settings_and_checkpoint_volume() -> None:
    svcs = services("cluster")
    driver, worker = svcs["pipeline"], svcs["spark-worker"]
    assert worker["environment"] == driver["environment"]
    home = driver["environment"]["STREAMFOLD_HOME"]
    mounts = [{v.split(":")[1]: v.split(":")[0] for v in s["volumes"]}.get(home) for s in (driver, worker)]
    assert mounts[0] and mounts[0] == mounts[1], "state store checkpoints must be one volume for both"


def test_the_job_connects_as_the_writer_role_and_setup_as_the_superuser() -> None:
    svcs = services("base")
    pipeline = conninfo_to_dict(svcs["pipeline"]["environment"]["STREAMFOLD_PG_DSN"])
    setup = conninfo_to_dict(svcs["setup"]["environment"]["STREAMFOLD_PG_DSN"])
    assert pipeline["user"] == config.WRITER_ROLE
    # compose_settings: .env as overridden by the environment, as docker-compose interpolated it.
    assert pipeline["password"] == containers.compose_settings()["STREAMFOLD_WRITER_PASSWORD"]
    assert setup["user"] == svcs["postgres"]["environment"]["POSTGRES_USER"]
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
    assert "mvn -q -P join package" in jars and "mvn -q -P join package" in bootstrap
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


def test_maven_profiles_used_by_the_images_exist() -> None:
    used = {m for _, args in instructions(DOCKERFILE) for m in re.findall(r"-P (\w+)", args)}
    assert used == {"kafka", "debezium", "spark", "join"} and used <= pom_profiles()


def test_requirements_and_pom_exist_once() -> None:
    skip = {".git", ".venv", "node_modules", "lib", ".streamfold"}
    copies = [
        p.relative_to(REPO)
        for p in REPO.rglob("*")
        if p.name in {"requirements.txt", "pom.xml"} and not skip & set(p.relative_to(REPO).parts)
    ]
    assert sorted(map(str, copies)) == ["pom.xml", "requirements.txt"]


def test_dockerignore_sends_what_the_images_copy_and_no_secrets() -> None:
    rules = [
        r.strip() for r in (REPO / ".dockerignore").read_text().splitlines() if r.strip() and r[0] != "#"
    ]
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    for source in copied_sources(DOCKERFILE):
        assert source.split("/")[0] in allowed, f"the Dockerfile copies {source}"
    assert "compose/.env" in rules[rules.index("!compose") :]
    assert not allowed & set(HOST_ONLY), "the host's launchers are no part of any image"
    assert not list(COMPOSE.rglob("*.py")), "compose/ holds the Docker files only"


def test_the_pipeline_image_copies_the_code_services_run_and_no_launcher() -> None:
    stage = stages(DOCKERFILE)["pipeline"]
    copies = [args.split() for i, args in stage if i == "COPY" and "--from=" not in args]
    copied = {source.split("/")[0] for words in copies for source in words[:-1]}
    assert copied == {"pyproject.toml", *CODE_DIRS}


def test_mounted_files_exist() -> None:
    for name, svc in services("cluster").items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            assert not source.startswith("/") or Path(source).exists(), f"{name} mounts missing {source}"


# ---------------------------------------------------------------- (5) operations rules


@pytest.mark.parametrize("fileset", FILESETS)
def test_long_running_services_have_healthchecks(fileset: str) -> None:
    svcs = services(fileset)
    assert one_shot(svcs) == {"setup"}
    assert svcs["setup"]["restart"] == "no"
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
    assert set(containers.INFRA_SERVICES) == set(svcs) - CODE_SERVICES
    ports = {variable(str(p)) for n in containers.INFRA_SERVICES for p in raw_services("base")[n]["ports"]}
    assert ports == set(containers.PORT_VARS)


def test_containers_export_what_the_local_stack_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = containers.isolated_settings(pid=4242)
    env = containers.stack_env(settings, tmp_path)
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
