"""The class-data archive `make setup` builds (pipeline/class_archive.py) matches the job's driver JVM.

A JVM told -Xshare:on refuses to start when its archive does not match its class path or JDK, where the
job's JVM (-Xshare:auto) would silently start without it: so a session started that way proves the archive
is used. In a process of its own: the unit tests' session is another JVM.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline import class_archive
from pipeline import spark as spark_session

ROOT = Path(__file__).resolve().parents[2]

START = """
from pipeline import spark
options = spark.settings({"spark.master": "local[1]"})["spark.driver.extraJavaOptions"]
session = spark.session("class-archive-check", {"spark.master": "local[1]",
                        "spark.driver.extraJavaOptions": options + " -Xshare:on"})
print(session.range(3).count())
"""


def test_the_setup_archive_maps_into_a_local_driver():
    archive = spark_session.jars_dir() / class_archive.ARCHIVE
    assert archive.exists(), f"{archive} missing: make setup builds it"
    result = subprocess.run(
        [sys.executable, "-c", START], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("3"), result.stderr[-2000:]
