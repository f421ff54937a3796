"""kinesalite, the Kinesis-compatible endpoint (Node.js), on LevelDB under the stack's data dir and kept on
loopback.

LevelDB appends each write to its log, so a put costs the same however long the stream is, and a kill at
any moment keeps every acknowledged record (docs/decisions/kinesis-endpoint.md)."""

from __future__ import annotations

from botocore.config import Config as BotoConfig

from common import kinesis
from stack.home import AWS_ENV
from stack.prerequisites import KINESIS_MAIN
from stack.service import Service

# One quick attempt: a health check is repeated until the service is up.
HEALTH_CHECK = BotoConfig(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1})
# kinesalite has no bind-address setting and listens on every interface; this preload keeps it
# on loopback like every other service. kinesalite also rethrows a request's error, and Node 20 gives an
# `aborted` ECONNRESET error to every request whose client closed the connection before the answer (a
# job killed mid-call, a timed-out read): uncaught, it ended the endpoint for every other client. The
# preload logs those and keeps serving; any other uncaught error still ends the process.
KINESIS_LOOPBACK_JS = """\
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
  return listen.apply(this, args);
};
process.on('uncaughtException', (err) => {
  if (err && err.code === 'ECONNRESET') {
    console.error(`a client closed its connection mid-request: ${err.message}`);
    return;
  }
  console.error(err);
  process.exit(1);
});
"""
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
        return str(self.stack.path("conf", "kinesis-loopback.js"))

    @property
    def marker(self) -> str:
        return self.preload

    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.stack.ports['kinesis']}"

    def prepare(self) -> None:
        self.stack.path("conf", "kinesis-loopback.js").write_text(KINESIS_LOOPBACK_JS)
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
