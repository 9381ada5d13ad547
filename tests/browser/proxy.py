"""A TCP proxy between the browser and a live server that a test can cut: `freeze()` is a
network that vanished without closing anything (bytes held, new connections accepted and
left hanging), `thaw()` brings it back (the held connections die, new ones go through),
`drop()` closes every open connection at once, `refuse()` is a server that went away
(open connections close, new ones are refused) and `listen()` brings it back."""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.browser.server import free_port


class Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0  # accepted so far: each WebSocket handshake is one
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.listen()

    def listen(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def refuse(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept, stops listening
            listener.close()
        self.drop()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._open.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._flowing.wait()  # a frozen network: the connection hangs, unanswered
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return
        with self._lock:
            self._open.append(upstream)
        for source, target in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                target.sendall(data)
        except OSError:
            pass
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def drop(self) -> None:
        with self._lock:
            held, self._open = self._open, []
        for end in held:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self.drop()  # what was held when the network went is gone
        self._flowing.set()

    def close(self) -> None:
        # Closed, not shut down: the accept under way still takes one more connection, so
        # a page still open at the end of a test does not log a refused one.
        if self._listener is not None:
            self._listener.close()
        self.drop()
        self._flowing.set()
