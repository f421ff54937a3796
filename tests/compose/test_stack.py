"""The README's compose story on real containers, checked against an independent computation.

The tests run in file order on one stack (tests/compose/conftest.py): the stack comes up healthy, the
images are what the pom, requirements.txt and package-lock.json say, PostgreSQL refuses physical
replication, then the README's commands, exactly as written there (`docker compose` spelled as this
machine's Compose): users and clicks through Kafka, a profile change, clicks through Kinesis; then
docs/avro.md's compose story on the same stack (examples/avro/pipeline.yaml: Avro change events through
Connect's Avro converter, Avro events, Avro outputs, a profile change); and finally `down -v`, after which
nothing of the project may remain.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import psycopg
import pytest
import requests

from common import config, names, plan
from common import pipeline_file as pf
from tests.compose.conftest import IMAGES, PROJECT, REPO, Compose, assert_project_gone, phase, wait_healthy
from tests.support import pipeline as sp
from tests.support.avro import decoded, registry_client
from tests.support.kafka import produce_once, read_all

README = (REPO / "README.md").read_text()
# The README's compose story, in its order. Each line must appear verbatim in README.md.
# Where README says the generated passwords are.
SECRETS = "docker compose exec -T kafka cat /run/streamfold/secrets.env"
GENERATE_USERS = "docker compose run --rm --no-deps setup streamfold generate users --count 1000"
GENERATE_CLICKS = (
    "docker compose run --rm --no-deps setup streamfold generate clicks --count 10000 --users 1000"
)
QUERY = "docker compose run --rm --no-deps setup streamfold query clicks_per_region"
PSQL_READER = (
    "docker compose exec -T postgres psql -U streamfold_reader -d streamfold \\\n"
    "  -c 'SELECT region, clicks FROM streamfold.clicks_per_region ORDER BY clicks DESC'"
)
PROFILE_CHANGE = (
    "docker compose exec -T postgres psql -U streamfold -d streamfold \\\n"
    "  -c \"UPDATE public.users SET regionid = 'Region_9' WHERE userid = 'User_1'\""
)
CHANGELOG = "docker compose run --rm --no-deps setup streamfold topic users_changelog"
KINESIS_UP = "PIPELINE_SOURCE=kinesis docker compose up -d"
KINESIS_CLICKS = (
    "docker compose run --rm --no-deps setup streamfold generate clicks --count 10000 --sink kinesis"
)
STORY = (
    SECRETS,
    GENERATE_USERS,
    GENERATE_CLICKS,
    QUERY,
    PSQL_READER,
    PROFILE_CHANGE,
    CHANGELOG,
    KINESIS_UP,
    KINESIS_CLICKS,
)
# Clicks of User_1 sent after the profile change.
AFTER_CHANGE = (
    "docker compose run --rm --no-deps setup streamfold generate clicks --count 50 --users 1 --seed 5"
)

# docs/avro.md's compose story, in its order; each line must appear verbatim there.
AVRO_DOC = (REPO / "docs" / "avro.md").read_text()
AVRO_FILE = "export STREAMFOLD_PIPELINE_FILE=../examples/avro/pipeline.yaml"
AVRO_UP = "docker compose up -d"
AVRO_EVENTS = "docker compose run --rm --no-deps setup streamfold generate events --count 2000 --users 1000"
AVRO_QUERY = "docker compose run --rm --no-deps setup streamfold query clicks_per_region_avro"
AVRO_PROFILE_CHANGE = (
    "docker compose exec -T postgres psql -U streamfold -d streamfold \\\n"
    "  -c \"UPDATE public.users SET regionid = 'Region_10' WHERE userid = 'User_2'\""
)
AVRO_CHANGELOG = "docker compose run --rm --no-deps setup streamfold topic users_avro_changelog"
AVRO_STORY = (AVRO_FILE, AVRO_UP, AVRO_EVENTS, AVRO_QUERY, AVRO_PROFILE_CHANGE, AVRO_CHANGELOG)
AVRO_PIPELINE = pf.load(REPO / "examples/avro/pipeline.yaml")
# Events of User_2 sent after its profile change.
AVRO_AFTER_CHANGE = (
    "docker compose run --rm --no-deps setup streamfold generate events --count 50 --users 1 --user-offset 1"
)
AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"


def output(result: subprocess.CompletedProcess[str]) -> str:
    """What a command printed (the CLI's rich console writes some of it to stderr)."""
    return result.stdout + result.stderr


def test_the_story_is_the_readme_s() -> None:
    missing = [line for line in STORY if line not in README]
    assert not missing, f"README.md no longer says: {missing}"
    missing = [line for line in AVRO_STORY if line not in AVRO_DOC]
    assert not missing, f"docs/avro.md no longer says: {missing}"


def client_env(stack: Compose, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The stack's published ports and generated passwords (read as README says), exported for the
    clients on the host that read its inputs and outputs; and the superuser's DSN, `admin_dsn`."""
    s, secrets = stack.settings(), config.parse_env(stack.shell(SECRETS).stdout)
    env = {
        "STREAMFOLD_KAFKA_BOOTSTRAP": f"127.0.0.1:{s['KAFKA_HOST_PORT']}",
        "STREAMFOLD_CONNECT_URL": f"http://127.0.0.1:{s['CONNECT_HOST_PORT']}",
        "STREAMFOLD_KINESIS_ENDPOINT": f"http://127.0.0.1:{s['KINESIS_HOST_PORT']}",
        "STREAMFOLD_REGISTRY_URL": f"http://127.0.0.1:{s['REGISTRY_HOST_PORT']}/apis/ccompat/v7",
        **{name: secrets[name] for name in (*config.SECRET_VARS, *config.LOGIN_VARS)},
        **{name: s[name] for name in config.AWS_VARS},
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    password = secrets["STREAMFOLD_PG_PASSWORD"]
    env["admin_dsn"] = f"postgresql://streamfold:{password}@127.0.0.1:{s['POSTGRES_HOST_PORT']}/streamfold"
    return env


@pytest.fixture(scope="module")
def host_env(stack: Compose, monkeypatch_module: pytest.MonkeyPatch) -> dict[str, str]:
    return client_env(stack, monkeypatch_module)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_every_service_healthy_and_setup_exited_0(stack: Compose) -> None:
    (setup,) = stack.containers("setup")
    assert setup["State"]["Status"] == "exited" and setup["State"]["ExitCode"] == 0
    for service in ("postgres", "kafka", "connect", "kinesis", "registry", "pipeline"):
        (container,) = stack.containers(service)
        assert container["State"]["Health"]["Status"] == "healthy", service


def test_the_registry_keeps_schemas_for_the_stacks_login_only(stack: Compose) -> None:
    """On its loopback-published port: a schema registered with secrets.env's login reads back by id; no
    login, no answer."""
    secrets = config.parse_env(stack.shell(SECRETS).stdout)
    url = f"http://127.0.0.1:{stack.settings()['REGISTRY_HOST_PORT']}/apis/ccompat/v7"
    auth = (secrets[config.REGISTRY_USER_VAR], secrets[config.REGISTRY_PASSWORD_VAR])
    schema = {"schema": json.dumps({"type": "record", "name": "Compose", "fields": []})}
    posted = requests.post(f"{url}/subjects/compose-value/versions", json=schema, auth=auth, timeout=30)
    assert posted.status_code == 200, posted.text
    read = requests.get(f"{url}/schemas/ids/{posted.json()['id']}", auth=auth, timeout=30)
    assert json.loads(read.json()["schema"])["name"] == "Compose"
    assert requests.get(f"{url}/subjects", timeout=30).status_code == 401


def image_run(stack: Compose, image: str, script: str) -> str:
    tag = stack.settings()["STREAMFOLD_IMAGE_TAG"]
    result = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "sh", f"streamfold/{image}:{tag}", "-c", script],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_images_come_from_the_base_and_the_version_files(stack: Compose) -> None:
    base_layers = json.loads(
        subprocess.run(
            ["docker", "image", "inspect", "-f", "{{json .RootFS.Layers}}", stack.env["BASE_IMAGE"]],
            capture_output=True,
            text=True,
            check=True,
        ).stdout  # fmt: skip
    )
    tag = stack.settings()["STREAMFOLD_IMAGE_TAG"]
    for image in IMAGES:
        layers = json.loads(
            subprocess.run(
                ["docker", "image", "inspect", "-f", "{{json .RootFS.Layers}}", f"streamfold/{image}:{tag}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout  # fmt: skip
        )
        assert layers[: len(base_layers)] == base_layers, (
            f"streamfold/{image} is not FROM {stack.env['BASE_IMAGE']}"
        )
        # The build stages' extra CAs (installed there as build-ca-*.crt) never reach a service image.
        extra = image_run(stack, image, "find / -xdev -name 'build-ca-*' 2>/dev/null; true")
        assert extra.strip() == "", f"streamfold/{image}: {extra}"

    pom = ET.parse(REPO / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = {el.tag.split("}")[1]: el.text for el in pom.findall("m:properties/*", ns)}
    jars = image_run(stack, "kafka", "ls /opt/kafka/libs /opt/kafka/plugins/debezium-connector-postgres")
    assert f"kafka_2.13-{props['kafka.version']}.jar" in jars
    assert f"connect-runtime-{props['kafka.version']}.jar" in jars
    assert f"debezium-connector-postgres-{props['debezium.version']}.jar" in jars
    spark_jars = image_run(stack, "pipeline", "ls /app/lib/spark")
    assert f"spark-sql-kafka-0-10_2.13-{props['spark.kafka.version']}.jar" in spark_jars
    assert f"postgresql-{props['postgresql.jdbc.version']}.jar" in spark_jars
    assert "streamfold-join.jar" in spark_jars

    wanted = {
        line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
        for line in (REPO / "requirements.txt").read_text().split()
    }
    frozen = image_run(stack, "pipeline", "pip freeze --all")
    have = {
        line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
        for line in frozen.split()
        if "==" in line
    }
    assert {name: have.get(name) for name in wanted} == wanted

    lock = json.loads((REPO / "package-lock.json").read_text())
    kinesis_version = lock["packages"]["node_modules/kinesalite"]["version"]
    shipped = json.loads(image_run(stack, "kinesis", "cat /opt/kinesis/node_modules/kinesalite/package.json"))
    assert shipped["version"] == kinesis_version
    assert image_run(stack, "postgres", "postgres --version").startswith("postgres (PostgreSQL) 15.")


def test_postgres_refuses_physical_replication(stack: Compose, host_env: dict[str, str]) -> None:
    s = host_env
    backup = stack.run(
        "exec", "-T", "-e", f"PGPASSWORD={s['STREAMFOLD_DEBEZIUM_PASSWORD']}", "postgres",
        "pg_basebackup", "-h", "127.0.0.1", "-U", "streamfold_debezium", "-D", "/tmp/copy", check=False,
    )  # fmt: skip
    assert backup.returncode != 0
    assert "no pg_hba.conf entry for replication connection" in backup.stderr, backup.stderr
    # The Debezium role may connect to its own database only.
    other_db = stack.run(
        "exec", "-T", "-e", f"PGPASSWORD={s['STREAMFOLD_DEBEZIUM_PASSWORD']}", "postgres",
        "psql", "-h", "127.0.0.1", "-U", "streamfold_debezium", "-d", "postgres", "-c", "select 1",
        check=False,
    )  # fmt: skip
    assert other_db.returncode != 0 and "pg_hba.conf rejects connection" in other_db.stderr, other_db.stderr


def test_kafka_and_connect_refuse_unauthenticated_clients(stack: Compose, host_env: dict[str, str]) -> None:
    """Anyone on the host reaches the published ports: without the stack's credentials, no record reaches
    the CDC topic and the connector cannot be deleted."""
    bootstrap = host_env["STREAMFOLD_KAFKA_BOOTSTRAP"]
    forged = json.dumps({"payload": {"op": "c", "after": {"userid": "forged"}}}).encode()
    assert (
        produce_once({"bootstrap.servers": bootstrap}, names.CDC_USERS_TOPIC, b"forged", forged) is not None
    )
    assert all(m.key != "forged" for m in read_all(bootstrap, names.CDC_USERS_TOPIC))
    url = f"{host_env['STREAMFOLD_CONNECT_URL']}/connectors/{names.CONNECTOR_NAME}"
    assert requests.delete(url, timeout=30).status_code == 401
    assert requests.get(url, auth=config.connect_auth(), timeout=30).status_code == 200


def wait_for_totals(host_env: dict[str, str], kinesis: bool, timeout_s: float) -> sp.Expected:
    """Wait until the job has written every click, then check it row by row against the oracle.

    The oracle reads the regions from the CDC topic only once the job has caught up. Read right after
    `generate users`, the topic may still lack the last inserts (Debezium had not published them yet), and
    the oracle would expect UNKNOWN where the job rightly joined: a race this test lost on CI.
    """
    want = oracle(host_env, kinesis)  # the clicks and their counts; regions come below
    total = sum(c for _, _, c in want.rows.values())
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(host_env["admin_dsn"], autocommit=True) as conn:
        while True:
            got = sp.summary(conn)
            if got["rows"] >= len(want.rows) and got["clicks"] >= total:
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"after {timeout_s:.0f} s the job wrote {got}, want {len(want.rows)} rows, {total} clicks"
                )
            time.sleep(3)
        time.sleep(5)  # a batch in flight would show up as doubled rows below
        want = oracle(host_env, kinesis)
        sp.assert_matches(conn, want)
    return want


def oracle(host_env: dict[str, str], kinesis: bool) -> sp.Expected:
    bootstrap = host_env["STREAMFOLD_KAFKA_BOOTSTRAP"]
    # The compose pipeline reads the contract's topic and stream.
    inputs = sp.kafka_inputs(bootstrap, names.CLICKS_TOPIC)
    inputs += sp.kinesis_inputs(names.CLICKS_STREAM) if kinesis else []
    return sp.expected(inputs, sp.profile_history(bootstrap), sp.cdc_dead_letters(bootstrap))


def test_kafka_story(stack: Compose, host_env: dict[str, str]) -> None:
    started = time.monotonic()
    out = output(stack.shell(GENERATE_USERS))
    assert "1000 profiles inserted into public.users" in out, out
    out = output(stack.shell(GENERATE_CLICKS))
    assert "10000 events sent to kafka clicks" in out, out
    want = wait_for_totals(host_env, kinesis=False, timeout_s=300)
    assert len(want.rows) == 10_000 and not want.dead
    stack.timings["kafka story"] = time.monotonic() - started
    phase(f"10,000 Kafka clicks joined and checked in {stack.timings['kafka story']:.0f} s")

    per_region = want.per_region()
    queried = output(stack.shell(QUERY))
    psql = output(stack.shell(PSQL_READER))
    for region, clicks in per_region.items():
        assert re.search(rf"{region}\W+{clicks}\b", queried), (region, clicks, queried)
        assert re.search(rf"{region}\s*\|\s*{clicks}\b", psql), (region, clicks, psql)


def moved(changelog: str, user: str, region: str) -> bool:
    """A record `<partition>:<offset> <user> {...}` with the new region (other users may be in it)."""
    return any(line.split(" ", 2)[1:2] == [user] and region in line for line in changelog.splitlines())


def change_profile(stack: Compose, update: str, changelog_line: str, user: str, region: str) -> float:
    """`update` (a psql line moving `user` to `region`), then until the change went through Debezium and
    the job's CDC fold into the changelog topic (`changelog_line` prints it). When the change was made."""
    changed_at = time.time()
    assert "UPDATE 1" in output(stack.shell(update))
    deadline = time.monotonic() + 120
    while not moved(changelog := output(stack.shell(changelog_line)), user, region):
        assert time.monotonic() < deadline, f"the changelog never showed {user} in {region}:\n{changelog}"
        time.sleep(5)
    return changed_at


def test_profile_change_reaches_the_join(stack: Compose, host_env: dict[str, str]) -> None:
    with psycopg.connect(host_env["admin_dsn"]) as conn:
        row = conn.execute("SELECT regionid FROM public.users WHERE userid = 'User_1'").fetchone()
    assert row is not None and row[0] != "Region_9"
    before = row[0]
    changed_at = change_profile(stack, PROFILE_CHANGE, CHANGELOG, "User_1", "Region_9")
    stack.shell(AFTER_CHANGE)
    wait_for_totals(host_env, kinesis=False, timeout_s=300)
    with psycopg.connect(host_env["admin_dsn"]) as conn:
        regions = conn.execute(
            "SELECT click_time >= to_timestamp(%s), user_regionid, count(*) FROM streamfold.enriched_clicks "
            "WHERE uid = 'User_1' GROUP BY 1, 2",
            [changed_at],
        ).fetchall()
    by_side = {after: (region, n) for after, region, n in regions}
    assert by_side[True] == ("Region_9", 50), regions
    assert by_side.get(False, (before, 0))[0] == before, regions


def test_kinesis_story(stack: Compose, host_env: dict[str, str]) -> None:
    started = time.monotonic()
    stack.shell(KINESIS_UP, timeout=900)
    (pipeline,) = stack.containers("pipeline")
    assert pipeline["Config"]["Cmd"][-2:] == ["--source", "kinesis"], pipeline["Config"]["Cmd"]
    wait_healthy(stack, ("pipeline",), 300)
    out = output(stack.shell(KINESIS_CLICKS))
    assert "10000 events sent to kinesis clicks" in out, out
    want = wait_for_totals(host_env, kinesis=True, timeout_s=300)
    assert len([e for e in want.rows if e.startswith("kinesis:")]) == 10_000
    stack.timings["kinesis story"] = time.monotonic() - started
    phase(f"10,000 Kinesis clicks joined and checked in {stack.timings['kinesis story']:.0f} s")


@pytest.fixture(scope="module")
def avro_stack(stack: Compose) -> Compose:
    """The stack with AVRO_FILE's pipeline file mounted into `setup` and `pipeline`."""
    name, value = AVRO_FILE.removeprefix("export ").split("=")
    return dataclasses.replace(stack, env={**stack.env, name: value})


def test_avro_pipeline_runs_with_the_avro_converter(avro_stack: Compose, host_env: dict[str, str]) -> None:
    """`up -d` with the Avro file: `setup` runs again, its connector writes Avro through Apicurio's
    converter (its schemas registered), the job runs the Avro file; the default pipeline's data stays."""
    started = time.monotonic()
    avro_stack.shell(AVRO_UP, timeout=900)
    wait_healthy(avro_stack, ("pipeline",), 300)
    (setup,) = avro_stack.containers("setup")
    assert setup["State"]["ExitCode"] == 0
    (job,) = avro_stack.containers("pipeline")
    mounted = {m["Destination"]: m["Source"] for m in job["Mounts"]}
    assert mounted["/etc/streamfold/pipeline.yaml"] == str(REPO / "examples/avro/pipeline.yaml"), mounted
    p = AVRO_PIPELINE
    url = f"{host_env['STREAMFOLD_CONNECT_URL']}/connectors/{plan.of(p).connector}"
    connector = requests.get(f"{url}/config", auth=config.connect_auth(), timeout=30).json()
    assert connector["key.converter"] == connector["value.converter"] == AVRO_CONVERTER, connector
    assert connector["value.converter.apicurio.registry.url"] == "http://registry:8080/apis/registry/v2"
    state = requests.get(f"{url}/status", auth=config.connect_auth(), timeout=30).json()
    assert [t["state"] for t in state["tasks"]] == ["RUNNING"], state
    registry = f"{host_env['STREAMFOLD_REGISTRY_URL']}/subjects"
    auth = config.registry_auth()
    deadline = time.monotonic() + 120  # the connector registers the value schema with its first record
    while f"{plan.of(p).cdc_topic}-value" not in (
        subjects := requests.get(registry, auth=auth, timeout=30).json()
    ):
        assert time.monotonic() < deadline, f"no subject {plan.of(p).cdc_topic}-value in {subjects}"
        time.sleep(3)
    # The PII boundary holds in the registry too: the profile's change events' schema names the carried
    # columns only (the subject's other versions: the heartbeat table's, routed to the same topic).
    carried, heartbeat = {p.profile.key, *p.profile.columns}, {"id", "ts"}
    rows = [
        row_columns(schema) for schema in subject_schemas(registry, auth, f"{plan.of(p).cdc_topic}-value")
    ]
    assert carried in rows and all(row in (carried, heartbeat) for row in rows), rows
    avro_stack.timings["avro up"] = time.monotonic() - started


def subject_schemas(subjects_url: str, auth: tuple[str, str] | None, subject: str) -> list[dict]:
    """Every version's schema under a subject of the registry."""
    versions = requests.get(f"{subjects_url}/{subject}/versions", auth=auth, timeout=30).json()
    return [
        json.loads(
            requests.get(f"{subjects_url}/{subject}/versions/{v}", auth=auth, timeout=30).json()["schema"]
        )
        for v in versions
    ]


def row_columns(envelope: dict) -> set[str]:
    """The columns of a Debezium envelope's Avro schema: the fields of the row record `before` and `after`
    are (defined where first used, by name after that)."""
    sides = [f["type"] for f in envelope["fields"] if f["name"] in ("before", "after")]
    (row,) = [t for union in sides for t in union if isinstance(t, dict)]
    return {f["name"] for f in row["fields"]}


def avro_rows(host_env: dict[str, str], where: str = "true", *params: object) -> list[tuple]:
    """(uid, user_regionid, clicks, click_time) of the Avro pipeline's enriched rows."""
    with psycopg.connect(host_env["admin_dsn"]) as conn:
        return conn.execute(
            f"SELECT uid, user_regionid, clicks, click_time FROM {plan.of(AVRO_PIPELINE).enriched_table} "
            f"WHERE {where}",
            params,
        ).fetchall()


def wait_for_avro_rows(
    host_env: dict[str, str], count: int, where: str = "true", *params: object
) -> list[tuple]:
    deadline = time.monotonic() + 300
    while len(rows := avro_rows(host_env, where, *params)) < count:
        assert time.monotonic() < deadline, f"after 300 s {len(rows)} of {count} Avro events landed"
        time.sleep(3)
    time.sleep(5)  # a batch in flight would show up as more rows
    rows = avro_rows(host_env, where, *params)
    assert len(rows) == count
    return rows


def test_avro_events_land_joined_in_postgres_and_on_avro_topics(
    avro_stack: Compose, host_env: dict[str, str]
) -> None:
    """Avro clicks, joined with the profiles the Avro change events carried (the snapshot of the users the
    Kafka story made), in Postgres, in the aggregate, and on the enriched topic in Avro."""
    started = time.monotonic()
    out = output(avro_stack.shell(AVRO_EVENTS))
    assert f"2000 events sent to kafka {AVRO_PIPELINE.events.kafka_topic}" in out, out
    rows = wait_for_avro_rows(host_env, 2000)
    with psycopg.connect(host_env["admin_dsn"]) as conn:
        regions = dict(conn.execute("SELECT userid, regionid FROM public.users").fetchall())
        dead = conn.execute(
            "SELECT source, reason FROM streamfold.dead_letters WHERE source IN (%s, %s)",
            [f"kafka:{AVRO_PIPELINE.events.kafka_topic}", f"kafka:{plan.of(AVRO_PIPELINE).cdc_topic}"],
        ).fetchall()
    assert not dead
    assert [(uid, region) for uid, region, *_ in rows if regions[uid] != region] == []
    per_region: dict[str, int] = {}
    for _, region, clicks, _ in rows:
        per_region[region] = per_region.get(region, 0) + clicks
    queried = output(avro_stack.shell(AVRO_QUERY))
    for region, clicks in per_region.items():
        assert re.search(rf"{region}\W+{clicks}\b", queried), (region, clicks, queried)
    topic = decoded(
        registry_client(), host_env["STREAMFOLD_KAFKA_BOOTSTRAP"], plan.of(AVRO_PIPELINE).enriched_topic
    )
    assert sorted((v["uid"], v["user_regionid"], v["clicks"]) for _, v in topic) == sorted(
        (uid, region, clicks) for uid, region, clicks, _ in rows
    )
    avro_stack.timings["avro events"] = time.monotonic() - started
    phase(f"2,000 Avro clicks joined and checked in {avro_stack.timings['avro events']:.0f} s")


def test_avro_profile_change_reaches_the_join(avro_stack: Compose, host_env: dict[str, str]) -> None:
    with psycopg.connect(host_env["admin_dsn"]) as conn:
        row = conn.execute("SELECT regionid FROM public.users WHERE userid = 'User_2'").fetchone()
    assert row is not None and row[0] != "Region_10"
    before = avro_rows(host_env, "uid = 'User_2'")
    # Through the Avro converter and the job's fold into the changelog topic, in Avro (printed as JSON).
    changed_at = change_profile(avro_stack, AVRO_PROFILE_CHANGE, AVRO_CHANGELOG, "User_2", "Region_10")
    avro_stack.shell(AVRO_AFTER_CHANGE)
    after = wait_for_avro_rows(host_env, 50, "uid = 'User_2' AND click_time >= to_timestamp(%s)", changed_at)
    assert {region for _, region, *_ in after} == {"Region_10"}, after
    assert avro_rows(host_env, "uid = 'User_2' AND click_time < to_timestamp(%s)", changed_at) == before


def test_down_v_leaves_nothing(stack: Compose) -> None:
    stack.run("down", "-v", timeout=300)
    assert_project_gone(stack)
    # By name too (Compose prefixes volumes with the project, with or without its dashes).
    volumes = subprocess.run(
        ["docker", "volume", "ls", "-q"], capture_output=True, text=True, check=True
    ).stdout
    prefixes = (PROJECT, PROJECT.replace("-", ""))
    assert not [v for v in volumes.split() if v.startswith(prefixes)], volumes
