"""A real local HTTP server that receives webhooks: it answers each POST as scripted and
keeps what it got, and checks signatures by its own HMAC, not the sender's library."""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PUBLIC_IP = "93.184.215.14"  # any global address: the tests' resolver names it, nobody dials it
# What the `dns` fixture maps a name to whose name server never answers.
NO_ANSWER = "no answer"


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    def signed_by(self, secret: str) -> bool:
        """Whether the signature is the Standard Webhooks one, keyed by `secret`."""
        key = base64.b64decode(secret.removeprefix("whsec_"))
        signed = f"{self.webhook_id}.{self.headers['webhook-timestamp']}.".encode() + self.body
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        version, _, signature = self.headers["webhook-signature"].partition(",")
        return version == "v1" and hmac.compare_digest(signature, expected)


class Receiver:
    """Answers the scripted statuses in turn (then 200); "hang" holds a request until
    `release()`; a 3xx comes with a Location to /elsewhere on itself."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.received: list[Received] = []
        self.answered: list[int] = []
        self.arrived = threading.Event()
        self._release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                receiver.received.append(Received(self.path, headers, body))
                receiver.arrived.set()
                answer = receiver.answers.pop(0) if receiver.answers else 200
                if answer == "hang":
                    receiver._release.wait(30)
                    return  # the connection closes unanswered
                receiver.answered.append(answer)  # before the sender can read it
                self.send_response(answer)
                if 300 <= answer < 400:
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://hooks.example.test:{self.port}/reportline"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def release(self) -> None:
        self._release.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
