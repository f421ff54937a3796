"""kinesalite, the Kinesis-compatible endpoint (Node.js), on LevelDB under the stack's data dir and kept on
loopback.

LevelDB appends each write to its log, so a put costs the same however long the stream is, and a kill at
any moment keeps every acknowledged record (docs/decisions/kinesis-endpoint.md)."""

from __future__ import annotations

from pathlib import Path

from botocore.config import Config as BotoConfig

from common import kinesis
from stack.home import AWS_ENV
from stack.prerequisites import KINESIS_MAIN
from stack.service import Service

# One quick attempt: a health check is repeated until the service is up.
HEALTH_CHECK = BotoConfig(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1})
# Loaded into kinesalite (`node --require`): keeps it on loopback, keeps it serving when a client drops a
# request mid-way, and converts sequence numbers with BigInt instead of bignumber.js (half its CPU).
PRELOAD_JS = Path(__file__).resolve().parent / "kinesalite_preload.js"
# kinesalite refuses streams past this many shards in all (real accounts start at 500 per region); the
# test suites create a stream per scenario.
SHARD_LIMIT = 10_000


def kinesalite_args(port: int, path: str) -> list[str]:
    """kinesalite's command-line options, shared with the compose image: streams are ACTIVE at once."""
    return [
        f"--port={port}",
        f"--path={path}",
        "--createStreamMs=0",
        "--deleteStreamMs=0",
        "--updateStreamMs=0",
        f"--shardLimit={SHARD_LIMIT}",
    ]


class Kinesis(Service):
    name = "kinesis"
    port_names = ("kinesis",)
    health_timeout = 60.0

    @property
    def preload(self) -> str:
        # The name it had when it only kept kinesalite on loopback: a stack started before finds its endpoint.
        return str(self.stack.path("conf", "kinesis-loopback.js"))

    @property
    def marker(self) -> str:
        return self.preload

    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.stack.ports['kinesis']}"

    def prepare(self) -> None:
        # A copy per stack: its path in the command line tells this stack's endpoint from another's.
        Path(self.preload).write_text(PRELOAD_JS.read_text())
        self.stack.path("data", "kinesis").mkdir(exist_ok=True)

    def launch(self) -> None:
        args = kinesalite_args(self.stack.ports["kinesis"], str(self.stack.path("data", "kinesis")))
        self._spawn_recorded(["node", "--require", self.preload, str(KINESIS_MAIN), *args], self.log)

    def healthy(self) -> bool:
        client = kinesis.client(
            HEALTH_CHECK,
            endpoint_url=self.endpoint(),
            region_name=AWS_ENV["AWS_DEFAULT_REGION"],
            aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        )
        try:
            client.list_streams()
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False
        return True
