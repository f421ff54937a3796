"""Writes a manifest-only jar whose Class-Path names every jar of the installed pyspark (its jars/ folder).

Maven Central has no spark-catalyst or spark-sql-api 4.3.0, so the JVM code (pom.xml's join profile)
compiles and runs its JUnit suite against the jars pyspark ships, through this one jar as a
system-scoped dependency: javac and the test JVM both follow a jar's Class-Path.

    .venv/bin/python scripts/pyspark_classpath.py [TARGET]    (default: lib/pyspark-classpath.jar)

Run with the venv's Python: it names the jars of the pyspark that Python imports. The entries are absolute
file: URLs, so the jar holds only where it was made (scripts/bootstrap.sh remakes it after pip install).
"""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TARGET = ROOT / "lib" / "pyspark-classpath.jar"
# The JAR specification: no manifest line longer than 72 bytes; a continuation line starts with a space.
LINE_BYTES = 72


def pyspark_jars() -> list[Path]:
    """Every jar in the importable pyspark's jars/ folder, sorted by name."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pyspark is not importable: run this with the venv's Python")
    jars = sorted((Path(spec.submodule_search_locations[0]) / "jars").glob("*.jar"))
    if not jars:
        raise SystemExit("pyspark has no jars/ folder")
    return jars


def wrap(header: bytes) -> bytes:
    """One manifest header folded into lines of at most LINE_BYTES bytes (CRLF not counted)."""
    lines = [header[:LINE_BYTES]]
    rest = header[LINE_BYTES:]
    while rest:
        lines.append(b" " + rest[: LINE_BYTES - 1])
        rest = rest[LINE_BYTES - 1 :]
    return b"".join(line + b"\r\n" for line in lines)


def manifest(jars: list[Path]) -> bytes:
    class_path = " ".join(jar.resolve().as_uri() for jar in jars)
    return b"Manifest-Version: 1.0\r\n" + wrap(f"Class-Path: {class_path}".encode()) + b"\r\n"


def write(target: Path, jars: list[Path]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(partial, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", manifest(jars))
    partial.replace(target)


def main(argv: list[str]) -> None:
    target = Path(argv[0]) if argv else DEFAULT_TARGET
    jars = pyspark_jars()
    write(target, jars)
    print(f"{target}: {len(jars)} jars of {jars[0].parent}")


if __name__ == "__main__":
    main(sys.argv[1:])
