"""The jars the JVM code compiles against as `provided` (pom.xml's join profile) are the ones pyspark ships:
the job finds them on Spark's classpath at run time, at the version the code was compiled and tested with."""

from __future__ import annotations

import re
from pathlib import Path

import pyspark
import pytest

ROOT = Path(__file__).resolve().parents[2]
POM = (ROOT / "pom.xml").read_text()
JARS = Path(pyspark.__file__).parent / "jars"


@pytest.mark.parametrize(
    ("property_name", "jar"),
    [
        ("avro.version", "avro"),
        ("slf4j.version", "slf4j-api"),
        ("dropwizard.metrics.version", "metrics-core"),
    ],
)
def test_a_provided_jar_is_the_one_pyspark_ships(property_name: str, jar: str) -> None:
    version = re.search(rf"<{re.escape(property_name)}>([^<]+)<", POM)
    assert version, f"pom.xml has no {property_name}"
    assert (JARS / f"{jar}-{version.group(1)}.jar").is_file(), sorted(
        p.name for p in JARS.glob(f"{jar}-*.jar")
    )
