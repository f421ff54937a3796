"""The source table's schema changes while the job runs: a column added and dropped, and `regionid`
turned into an integer column, after which Debezium emits `"regionid": 3`. The fold takes a number as
its decimal text, so the job keeps running and clicks keep joining the right version. A carried column
renamed is drift: unknown in the versions after it, never silently null."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
import uuid

import psycopg
import pytest
import requests
from psycopg import sql

from common import names, plan, topics
from common import pipeline_file as pf
from connectors.setup import run_setup
from tests.support import pipeline as sp
from tests.support.kafka import read_all

pytestmark = pytest.mark.e2e

TO_INTEGER = (
    "ALTER TABLE public.users ALTER COLUMN regionid TYPE integer "
    "USING CASE WHEN regionid ~ '^[0-9]{1,9}$' THEN regionid::integer END"
)


def publish(pg: psycopg.Connection, columns: tuple[str, ...]) -> None:
    """The publication's column list, as db/schema.py sets it, with `columns` for public.users."""
    pg.execute(
        sql.SQL("ALTER PUBLICATION {} SET TABLE public.users ({}), streamfold.cdc_heartbeat").format(
            sql.Identifier(names.PUBLICATION_NAME), sql.SQL(", ").join(map(sql.Identifier, columns))
        )
    )


def retype_regionid(pg: psycopg.Connection, statement: str) -> None:
    """PostgreSQL refuses to retype a column in a publication's column list: take it out, retype, put it
    back (what an operator has to do; changes committed in between carry no regionid)."""
    pipeline = pf.load()
    columns = plan.of(pipeline).captured[pipeline.profile.table]
    publish(pg, tuple(c for c in columns if c != "regionid"))
    pg.execute(statement)
    publish(pg, columns)


def now_ms() -> int:
    return int(time.time() * 1000)


def joined(sandbox: sp.Sandbox, user: str) -> list[tuple[str, str]]:
    with sandbox.connect() as conn:
        return conn.execute(
            f"SELECT click_url, user_regionid FROM {names.ENRICHED_CLICKS_TABLE} WHERE uid = %s "
            "ORDER BY click_time",
            (user,),
        ).fetchall()


def test_added_dropped_and_retyped_columns_keep_the_job_joining(pg, streamfold_setup, tmp_path_factory):
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "drift", tmp_path_factory.mktemp("drift"))
    user = f"drift-{uuid.uuid4().hex[:6]}"
    regions = pg.execute("SELECT userid, regionid FROM public.users").fetchall()
    pg.execute("INSERT INTO public.users (userid, regionid) VALUES (%s, '1')", (user,))
    log = sandbox.home / "job.log"
    job = sandbox.start("kafka", log)
    try:
        with sandbox.connect() as conn:
            sp.wait_until(
                lambda: conn.execute("SELECT count(*) FROM streamfold.sink_batches").fetchone()[0] > 0,
                240,
                "a first committed batch",
            )
        pg.execute("ALTER TABLE public.users ADD COLUMN nickname text")
        pg.execute("UPDATE public.users SET regionid = '2', nickname = 'n' WHERE userid = %s", (user,))
        time.sleep(1.5)
        with_added_column = now_ms()
        time.sleep(1.5)
        pg.execute("ALTER TABLE public.users DROP COLUMN nickname")
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="publication"):
            pg.execute(TO_INTEGER)  # a published column cannot change type under Debezium's feet
        with pytest.raises(psycopg.Error, match="publication"):
            pg.execute("ALTER TABLE public.users DROP COLUMN gender")
        retype_regionid(pg, TO_INTEGER)
        pg.execute("UPDATE public.users SET regionid = 3 WHERE userid = %s", (user,))
        time.sleep(1.5)
        as_integer = now_ms()
        producer = topics.producer(streamfold_setup.kafka_bootstrap)
        for url, t in (("/added", with_added_column), ("/integer", as_integer)):
            body = {"userid": user, "url": url, "device_id": "d", "ip": "i", "event_time": t}
            producer.produce(sandbox.clicks_topic, key=user, value=json.dumps(body).encode())
        assert producer.flush(30) == 0
        sp.wait_until(lambda: len(joined(sandbox, user)) == 2, 180, "both clicks joined")
        assert job.poll() is None, log.read_text()[-3000:]
    finally:
        if job.poll() is None:
            sp.kill9(job)
        pg.execute("ALTER TABLE public.users DROP COLUMN IF EXISTS nickname")
        if pg.execute("SELECT pg_typeof(regionid)::text FROM public.users LIMIT 1").fetchone() != ("text",):
            retype_regionid(pg, "ALTER TABLE public.users ALTER COLUMN regionid TYPE text")
        pg.execute(  # other tests' users got NULL where their region was not a number
            "UPDATE public.users u SET regionid = s.regionid "
            "FROM unnest(%s::text[], %s::text[]) AS s(userid, regionid) "
            "WHERE u.userid = s.userid AND u.regionid IS DISTINCT FROM s.regionid",
            ([u for u, _ in regions], [r for _, r in regions]),
        )

    assert joined(sandbox, user) == [("/added", "2"), ("/integer", "3")]
    after = [
        m.value["after"]
        for m in read_all(streamfold_setup.kafka_bootstrap, names.CDC_USERS_TOPIC)
        if m.value and m.value.get("after") and m.value["after"].get("userid") == user
    ]
    assert {"regionid": 3}.items() <= after[-1].items()  # Debezium really sent an integer
    assert not any("nickname" in a for a in after)  # not in the publication's column list
    with sandbox.connect() as conn:
        dead = conn.execute(
            f"SELECT reason FROM {names.DEAD_LETTERS_TABLE} WHERE position(%s IN payload) > 0",
            (user.encode(),),
        ).fetchall()
    assert not dead


def status(sandbox: sp.Sandbox, option: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamfold", "status", option],
        capture_output=True,
        text=True,
        timeout=120,
        env=sandbox.env(),
        cwd=sp.ROOT,
    )


def status_check(sandbox: sp.Sandbox) -> subprocess.CompletedProcess:
    return status(sandbox, "--check")


# The job's own metrics of the default pipeline's Kafka query (docs/operations.md, "Status and metrics").
JOB_METRIC = re.compile(
    r'^metrics_streamfold_driver_streamfold_clicks_kafka_(\w+)_(?:Count|Value)\{type="\w+"\} (\S+)$', re.M
)


def job_metrics(sandbox: sp.Sandbox) -> dict[str, float]:
    """The running job's own metrics, as its Prometheus servlet serves them: {"drift_changes": 0.0, ...}."""
    url = json.loads(status(sandbox, "--json").stdout)["job"]["prometheus"]
    response = requests.get(url, timeout=10)
    assert response.status_code == 200, response.text[:2000]
    return {name: float(value) for name, value in JOB_METRIC.findall(response.text)}


def test_a_renamed_column_is_unknown_in_later_versions_never_silently_null(
    pg, streamfold_setup, tmp_path_factory
):
    """PostgreSQL renames a column inside the publication's column list too, so Debezium's rows then lack
    it. The user's new version must say its interests are unknown, the clicks joining it are incomplete,
    the job says which column and `status --check` fails until someone acts."""
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "renamed", tmp_path_factory.mktemp("renamed"))
    user = f"renamed-{uuid.uuid4().hex[:6]}"
    pg.execute(
        "INSERT INTO public.users (userid, regionid, interests) VALUES (%s, 'Region_1', ARRAY['News'])",
        (user,),
    )
    log = sandbox.home / "job.log"
    job = sandbox.start("kafka", log)
    try:
        with sandbox.connect() as conn:
            sp.wait_until(
                lambda: conn.execute("SELECT count(*) FROM streamfold.sink_batches").fetchone()[0] > 0,
                240,
                "a first committed batch",
            )
        before = job_metrics(sandbox)
        assert (before["drift_changes"], before["drift_columns"]) == (0, 0), before
        assert "cdc_progress_age_s" in before, before
        pg.execute("ALTER TABLE public.users RENAME COLUMN interests TO hobbies")
        pg.execute("UPDATE public.users SET regionid = 'Region_2' WHERE userid = %s", (user,))
        time.sleep(1.5)
        body = {"userid": user, "url": "/renamed", "device_id": "d", "ip": "i", "event_time": now_ms()}
        producer = topics.producer(streamfold_setup.kafka_bootstrap)
        producer.produce(sandbox.clicks_topic, key=user, value=json.dumps(body).encode())
        assert producer.flush(30) == 0
        with sandbox.connect() as conn:
            sp.wait_until(
                lambda: (
                    conn.execute(
                        f"SELECT count(*) FROM {names.ENRICHED_CLICKS_TABLE} WHERE uid = %s", (user,)
                    ).fetchone()[0]
                    == 1
                ),
                180,
                "the click joined",
            )
        sp.wait_until(lambda: status_check(sandbox).returncode == 1, 60, "status --check failing")
        # The listener counts a batch once Spark reports its progress, after the batch landed the version.
        sp.wait_until(lambda: job_metrics(sandbox)["drift_changes"] > 0, 60, "the drift metric counting")
        after = job_metrics(sandbox)
        assert (after["drift_changes"], after["drift_columns"]) == (1, 1), after  # the user's one update
        assert not math.isnan(after["cdc_progress_age_s"]), after  # event_time mode observes progress
        assert job.poll() is None, log.read_text()[-3000:]
    finally:
        if job.poll() is None:
            sp.kill9(job)
        renamed = pg.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'users' "
            "AND column_name = 'hobbies'"
        ).fetchone()
        if renamed:
            pg.execute("ALTER TABLE public.users RENAME COLUMN hobbies TO interests")
        run_setup(streamfold_setup, echo=lambda _: None)

    with sandbox.connect() as conn:
        click = conn.execute(
            f"SELECT user_regionid, user_interests, profile_complete FROM {names.ENRICHED_CLICKS_TABLE} "
            "WHERE uid = %s",
            (user,),
        ).fetchone()
        versions = conn.execute(
            "SELECT regionid, interests, incomplete FROM streamfold.profile_history_clicks WHERE userid = %s "
            "ORDER BY valid_from, lsn",
            (user,),
        ).fetchall()
    assert click == ("Region_2", None, False)
    assert versions == [
        ("Region_1", ["News"], None),
        ("Region_2", None, "interests: missing from the change event: renamed or dropped?"),
    ]
    said = log.read_text()
    assert "public.users.interests: missing from the change event" in said and "`streamfold setup`" in said
    assert "public.users.interests" in status_check(sandbox).stdout  # from the history: the job is gone
