"""The JVM code (pom.xml's join profile: the join operator, the sink, the real-time Kafka source) compiles
against the jars pyspark ships, through the manifest-only jar scripts/pyspark_classpath.py writes: the job
finds the same jars on Spark's classpath at run time, at the version the code was compiled and tested
with."""

from __future__ import annotations

import re
import runpy
import zipfile
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[2]
POM = (ROOT / "pom.xml").read_text()
JARS = Path(pyspark.__file__).parent / "jars"
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "pyspark_classpath.py"))


def manifest_of(jar: Path) -> bytes:
    with zipfile.ZipFile(jar) as archive:
        return archive.read("META-INF/MANIFEST.MF")


def class_path(manifest: bytes) -> list[str]:
    """The Class-Path header's entries, its continuation lines joined (each starts with one space)."""
    text = manifest.decode().replace("\r\n ", "")
    header = next(line for line in text.split("\r\n") if line.startswith("Class-Path: "))
    return header.removeprefix("Class-Path: ").split(" ")


def test_the_classpath_jar_names_every_jar_of_pyspark(tmp_path: Path):
    target = tmp_path / "pyspark-classpath.jar"
    SCRIPT["main"]([str(target)])
    manifest = manifest_of(target)
    assert all(len(line) <= 72 for line in manifest.split(b"\r\n")), "a manifest line over 72 bytes"
    named = class_path(manifest)
    assert named == [jar.resolve().as_uri() for jar in sorted(JARS.glob("*.jar"))]
    assert any(uri.endswith(f"/spark-sql_2.13-{pyspark.__version__}.jar") for uri in named)


def test_the_join_profile_takes_no_jar_pyspark_ships_from_elsewhere():
    """One copy of each class on the compile and test classpath: the one pyspark runs the job with."""
    profile = re.search(r"<id>join</id>(.*?)</profile>", POM, re.S)
    assert profile, "pom.xml has no join profile"
    shipped = {re.sub(r"-\d[\w.-]*\.jar$", "", jar.name) for jar in JARS.glob("*.jar")}
    artifacts = re.findall(r"<artifactId>([^<]+)</artifactId>", profile.group(1))
    assert "pyspark-classpath" in artifacts
    assert not shipped & set(artifacts), "pom.xml pins a jar pyspark ships"
