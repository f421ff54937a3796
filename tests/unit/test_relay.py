"""The outage tests' TCP relay (tests/support/relay.py): down means down for every connection, the first
one after down() included, and up serves again on the same port."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.support.relay import TcpRelay

GUARD_S = 10  # only so that a broken relay fails the test instead of hanging it


class Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while data := self.rfile.read1(65536):
            self.wfile.write(data)


@pytest.fixture
def relay() -> Iterator[TcpRelay]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    relay = TcpRelay("127.0.0.1", server.server_address[1])
    yield relay
    relay.down()
    server.shutdown()
    server.server_close()


def connect(relay: TcpRelay) -> socket.socket:
    return socket.create_connection(("127.0.0.1", relay.port), timeout=GUARD_S)


def echoes(sock: socket.socket) -> bool:
    sock.sendall(b"ping")
    return sock.recv(4) == b"ping"


def closed(sock: socket.socket) -> bool:
    """Reset or closed by the relay: never relayed again."""
    try:
        return sock.recv(4) == b""
    except ConnectionResetError:
        return True


def test_down_resets_open_connections_and_refuses_new_ones(relay: TcpRelay) -> None:
    with connect(relay) as before:
        assert echoes(before)
        relay.down()
        with pytest.raises(ConnectionRefusedError):
            connect(relay)  # the first connection after down(): it once got through and stayed open
        with pytest.raises(ConnectionRefusedError):
            connect(relay)
        assert closed(before)


def test_up_serves_again_on_the_same_port(relay: TcpRelay) -> None:
    port = relay.port
    relay.down()
    relay.up()
    assert relay.port == port
    with connect(relay) as after:
        assert echoes(after)
