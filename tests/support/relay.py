"""A TCP relay that can play a service being down: connections refused and open ones reset.

The job under test talks to the relay; the service behind it keeps running (and keeps its data), so the
outage is exactly what a client sees of a stopped endpoint, without the risks of stopping the real one.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpRelay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        """Listen (again, on the same port once it has one)."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Stop listening (new connections are refused) and reset every open connection."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, set()
        if listener is not None:
            # shutdown() first: on Linux close() alone leaves the socket listening while the accept thread
            # is blocked in accept(), so one more connection would get through and outlive the outage.
            _close(listener)
        for sock in sockets:
            _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # shut down by down()
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                listening = self._listener is listener
                if listening:
                    self._open |= {client, server}
            if not listening:  # accepted just before down(): reset it like the others
                _close(client)
                _close(server)
                return
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open -= {src, dst}
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
