#!/usr/bin/env bash
# Spark 4.3.0's jars for jvm-realtime/ (the real-time Kafka source), idempotently, into a per-user cache.
# Maven Central has no spark-catalyst/spark-sql-api 4.3.0, but the pyspark 4.3.0 source distribution on
# PyPI carries every Spark jar (deps/jars/): download it once, keep the jars, drop the archive.
# Also writes classpath.jar, a manifest-only jar whose Class-Path names every jar beside it, so that
# jvm-realtime/pom.xml needs a single system-scoped dependency for both javac and the test JVM.
#
#   scripts/realtime_jars.sh          prints the jar directory (downloads ~456 MB the first time)
#   STREAMFOLD_SPARK_CACHE=DIR ...    caches under DIR instead of ~/.cache/streamfold
#   mvn -f jvm-realtime/pom.xml -Dspark.rt.jars="$(scripts/realtime_jars.sh)" test
set -euo pipefail

version=4.3.0
cache="${STREAMFOLD_SPARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamfold}/spark-$version"
jars="$cache/jars"
say() { printf '[realtime-jars] %s\n' "$*" >&2; }
die() { printf '[realtime-jars] error: %s\n' "$*" >&2; exit 1; }

if [ -f "$jars/.complete" ]; then
  echo "$jars"
  exit 0
fi

command -v jar >/dev/null || die "the JDK's jar tool is required"
python="${PYTHON:-python3}"
work="$cache/.partial"
rm -rf "$work" "$jars"
mkdir -p "$work/sdist" "$work/jars"
trap 'rm -rf "$work"' EXIT

say "pip download pyspark==$version (source distribution) -> $cache"
"$python" -m pip download -q --no-deps --no-binary :all: "pyspark==$version" -d "$work/sdist"
# Top-level deps/jars only: deps/jars/connect-repl is the Connect shell's, not the engine's.
tar -xzf "$work/sdist/pyspark-$version.tar.gz" -C "$work/jars" --strip-components=3 \
  --wildcards --no-wildcards-match-slash "pyspark-$version/deps/jars/*.jar"
[ -f "$work/jars/spark-sql_2.13-$version.jar" ] || die "no spark-sql_2.13-$version.jar in the sdist"

# Manifest lines hold at most 72 bytes; each jar goes on a continuation line ("  name": the first space
# continues the line, the second separates the entries).
manifest="$work/MANIFEST.MF"
{
  echo "Manifest-Version: 1.0"
  echo "Class-Path: "
  for path in "$work"/jars/*.jar; do
    name=$(basename "$path")
    [ ${#name} -le 69 ] || die "jar name too long for one manifest line: $name"
    echo "  $name"
  done
} >"$manifest"
jar --create --file "$work/jars/classpath.jar" --manifest "$manifest"

mv "$work/jars" "$jars"
touch "$jars/.complete"
say "$(find "$jars" -name '*.jar' | wc -l) jars in $jars"
echo "$jars"
