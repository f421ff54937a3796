"""The job driver's class-data archive (AppCDS): the classes a local job loads at start, mapped from one
file instead of read, verified and parsed from Spark's jars at every start.

`make setup` builds it into the jars folder (pipeline/class_archive_build.py); pipeline/spark.py hands it to
a local master's driver JVM when it is there. The JVM uses it only if the class path and the JDK are those
it was built with, and otherwise starts as without it, silently: an archive never stops a job.
Measurements: docs/decisions/spark-settings.md, "Start-up".
"""

from __future__ import annotations

from pathlib import Path

ARCHIVE = "streamfold.jsa"
# The JVM warns about every class it cannot archive (Spark's jars hold many) and about an archive that
# does not match; neither matters to a job, which then loads those classes as it would without one.
QUIET = "-Xlog:cds*=off"


def use(path: Path) -> str:
    """The driver's JVM options that map the archive."""
    return f"-XX:SharedArchiveFile={path} {QUIET}"
