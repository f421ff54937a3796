# The two commands people use are `make demo` and `make test`; both set up what is missing first.
SHELL := /bin/bash
VENV := .venv/bin
export STREAMFOLD_HOME ?= $(CURDIR)/.streamfold

.PHONY: setup demo test test-jvm unit e2e lint bench stack-down clean images test-cluster test-compose test-containers

setup:
	@bash scripts/bootstrap.sh

demo: setup
	@bash scripts/demo.sh

lint: setup
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/mypy common streamfold pipeline connectors db stack spec
	$(VENV)/lint-imports

# The JUnit suite and the unit tests first (seconds), then the end-to-end suite on one shared local stack,
# the cluster suite on another (with a Spark cluster), then the compose stack and the containers-backed
# tests on a real Docker Engine (started by the tests when none runs).
test: setup lint
	$(MAKE) --no-print-directory test-jvm
	$(VENV)/pytest tests/unit -q --durations=10
	$(MAKE) --no-print-directory e2e
	$(MAKE) --no-print-directory test-cluster
	$(MAKE) --no-print-directory test-compose
	$(MAKE) --no-print-directory test-containers

unit: setup
	$(MAKE) --no-print-directory test-jvm
	$(VENV)/pytest tests/unit -q

# The Java code's JUnit suites (jvm/src/test without the real-time Kafka source's broker test, and the
# bench's Kafka Streams app in jvm-kstreams/): Maven and a JDK only, no broker, seconds. Not quiet, so that
# Surefire's count of tests run shows.
test-jvm:
	mvn --no-transfer-progress -P join test
	mvn --no-transfer-progress -f jvm-kstreams/pom.xml test

# Own temp dir, as the suites below: another pytest session makes /tmp/pytest-of-$USER private (0700) when
# it starts, which would lock the stack's PostgreSQL (another user) out of a data dir below it. The slowest
# tests' times go to the log: the suites' share of CI's 90 minutes is what to trim first.
e2e: setup
	$(VENV)/pytest tests/e2e -q -p no:cacheprovider --durations=15 --basetemp=/tmp/streamfold-e2e-pytest

# The story and kill -9 of a worker and of the driver on a 2-worker Spark standalone cluster (tests/cluster):
# a session of its own, since its stack runs the cluster. Own temp dir: it may run beside another session.
test-cluster: setup
	$(VENV)/pytest tests/cluster -q -p no:cacheprovider --durations=5 --basetemp=/tmp/streamfold-cluster-pytest

# The compose stack's images. BASE_IMAGE=debian:bookworm-slim uses the registry's Debian; otherwise
# scripts/images.sh makes a Debian 12 base with debootstrap, once per machine. STREAMFOLD_BUILD_CA: a
# PEM bundle the builds must trust (this host's, by default: it holds any TLS-intercepting proxy's CA),
# copied to compose/build-ca/ and left there (git-ignored), so `docker compose up --build` hits the cache.
STREAMFOLD_BUILD_CA ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
export STREAMFOLD_BUILD_CA

images:
	@set -euo pipefail; base="$${BASE_IMAGE:-$$(bash scripts/images.sh)}"; \
	if [ -n "$(STREAMFOLD_BUILD_CA)" ]; then cp "$(STREAMFOLD_BUILD_CA)" compose/build-ca/streamfold-build-ca.crt; fi; \
	cd compose && BASE_IMAGE="$$base" docker-compose build --force-rm

# The compose stack end to end (tests/compose): build, up, the story of README "Run with Docker",
# down -v. Own temp dir: it may run while another pytest session holds the default one.
test-compose: setup
	$(VENV)/pytest tests/compose -q -p no:cacheprovider --basetemp=/tmp/streamfold-compose-pytest

# The CDC and pipeline tests on the compose stack's containers instead of local processes
# (tests/support/containers.py: testcontainers, `docker compose up --build --wait`, Compose v2).
# Own temp dir.
test-containers: setup
	$(VENV)/pytest tests/e2e/test_cdc.py tests/e2e/test_pipeline.py --stack=containers -q -p no:cacheprovider \
	  --basetemp=/tmp/streamfold-containers-pytest

bench: setup
	$(VENV)/python -m bench.run $(BENCH_ARGS)

stack-down:
	-$(VENV)/streamfold stack down

clean: stack-down
	rm -rf .streamfold
