"""The pipeline story on a 2-worker Spark cluster, with Kafka and with Kinesis as the click source.

The story of tests/e2e/test_pipeline.py (a user moving region between clicks that arrive in the wrong order,
her delete, an unknown user, snapshot rows, poison records), run once on the cluster; then Postgres row by
row against the oracle's independent computation over the raw inputs.
"""

from __future__ import annotations

import pytest

from common import names
from tests.e2e.test_pipeline import tell_story
from tests.support import cluster
from tests.support import pipeline as sp

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("source", ["kafka", "kinesis"])
def test_the_story_on_the_cluster_matches_the_oracle_row_by_row(
    source, pg, streamfold_setup, home, tmp_path_factory
):
    sandbox = sp.make_sandbox(
        streamfold_setup.pg_dsn, f"sink_cluster_{source}", tmp_path_factory.mktemp(f"cluster-{source}")
    )
    before = cluster.app_ids(home)
    story = tell_story(pg, streamfold_setup, sandbox, source)
    app = cluster.ran_on_every_worker(home, before, f"streamfold-{source}")
    print(f"{source}: {app['id']}'s executors by worker port: {cluster.executor_ids(home, app['id'])}")

    with sandbox.connect() as conn:
        alice = conn.execute(
            f"SELECT click_url, user_regionid FROM {names.ENRICHED_CLICKS_TABLE} WHERE uid = %s "
            "ORDER BY click_time",
            (story["alice"],),
        ).fetchall()
        ghost = conn.execute(
            f"SELECT user_regionid FROM {names.ENRICHED_CLICKS_TABLE} WHERE uid = %s", (story["ghost"],)
        ).fetchall()
    assert alice == [("/early", "UNKNOWN"), ("/asia", "asia"), ("/europe", "europe"), ("/gone", "UNKNOWN")]
    assert ghost == [("UNKNOWN",)]
    bootstrap = streamfold_setup.kafka_bootstrap
    want = sp.expected(
        sandbox.inputs(source, bootstrap), sp.profile_history(bootstrap), sp.cdc_dead_letters(bootstrap)
    )
    with sandbox.connect() as conn:
        sp.assert_matches(conn, want)
