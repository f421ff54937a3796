"""kinesis-local, the Kinesis-compatible endpoint (Node.js), kept on loopback and stopped only when
its data file is whole."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from botocore.config import Config as BotoConfig

from common import kinesis
from stack.home import AWS_ENV, port_free
from stack.prerequisites import KINESIS_MAIN
from stack.processes import wait_gone
from stack.service import Service

# One quick attempt: a health check is repeated until the service is up.
HEALTH_CHECK = BotoConfig(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1})
# kinesis-local has no bind-address setting and listens on every interface; this preload keeps it
# on loopback like every other service.
KINESIS_LOOPBACK_JS = """\
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
  return listen.apply(this, args);
};
"""


class Kinesis(Service):
    name = "kinesis"
    port_names = ("kinesis", "kinesis-tls")
    health_timeout = 60.0

    @property
    def preload(self) -> Path:
        return self.stack.path("conf", "kinesis-loopback.js")

    @property
    def marker(self) -> str:
        return str(self.preload)

    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.stack.ports['kinesis']}"

    def prepare(self) -> None:
        self.preload.write_text(KINESIS_LOOPBACK_JS)
        self.stack.path("data", "kinesis").mkdir(exist_ok=True)

    def launch(self) -> None:
        env = {
            "KINESIS_MOCK_PLAIN_PORT": str(self.stack.ports["kinesis"]),
            "KINESIS_MOCK_TLS_PORT": str(self.stack.ports["kinesis-tls"]),
            "KINESIS_MOCK_CERT_PATH": str(KINESIS_MAIN.parent / "server.json"),
            # Streams and records survive a restart.
            "SHOULD_PERSIST_DATA": "true",
            "PERSIST_PATH": str(self.stack.path("data", "kinesis")),
            "PERSIST_INTERVAL": "1s",
            "AWS_REGION": AWS_ENV["AWS_DEFAULT_REGION"],
        }
        self._spawn_recorded(["node", "--require", str(self.preload), str(KINESIS_MAIN)], self.log, env)

    @property
    def data_file(self) -> Path:
        return self.stack.path("data", "kinesis") / "kinesis-data.json"

    def stop(self) -> None:
        """kinesis-local rewrites its whole data file in place every PERSIST_INTERVAL: a stop in the middle
        of a write leaves it truncated, and the streams are gone at the next start. So it is
        frozen at a moment its file is whole, then killed; like any crash of it, that loses the writes of
        at most the last interval."""
        pid = self.pid()
        if pid is not None:
            _freeze_when_whole(pid, self.data_file)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            wait_gone(pid, 10)
            # A killed process's sockets close a moment after it is gone: wait, or a start right after
            # this stop finds its port taken.
            deadline = time.monotonic() + 10
            while not all(port_free(self.stack.ports[p]) for p in self.port_names):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)

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


def _freeze_when_whole(pid: int, data_file: Path, timeout: float = 30.0) -> None:
    """SIGSTOP the process group at a moment data_file is absent or whole JSON (not mid-rewrite)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGSTOP)
        if time.monotonic() > deadline or _whole_json(data_file):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)
        time.sleep(0.05)


def _whole_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return True
