"""A TCP proxy on 127.0.0.1 that a test can cut, as a network partition would: every
connection through it is closed at once and new ones are closed as soon as they are
accepted, until it is mended."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._open = True
        self._lock = threading.Lock()
        self._live: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                if not self._open:
                    client.close()
                    continue
                try:
                    upstream = socket.create_connection(self._target)
                except OSError:
                    client.close()
                    continue
                self._live += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self._lock:
            self._open = False
            for s in self._live:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._live = []

    def mend(self) -> None:
        with self._lock:
            self._open = True

    def close(self) -> None:
        self.cut()
        self._server.close()
