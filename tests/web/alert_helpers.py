"""Real receivers for the alert tests, on 127.0.0.1: an SMTP server (aiosmtpd) that keeps every message, and an
HTTP server (http.server in a thread) that keeps every POST and answers with the statuses a test plans."""

from __future__ import annotations

import email
import hashlib
import hmac
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Inbox:
    """aiosmtpd's handler: each message's envelope, parsed."""

    def __init__(self):
        self.messages: list[email.message.Message] = []
        self.recipients: list[list[str]] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(email.message_from_bytes(envelope.content))
        self.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted"


class SmtpServer:
    def __init__(self):
        self.inbox = Inbox()
        self.port = free_port()
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)

    def start(self) -> "SmtpServer":
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()


class Receiver:
    """Every POST as (headers, body); `plan` holds the statuses of the next answers (200 once it is empty)."""

    def __init__(self):
        self.posts: list[tuple[dict, bytes]] = []
        self.plan: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.posts.append(({key.lower(): value for key, value in self.headers.items()}, body))
                status = receiver.plan.pop(0) if receiver.plan else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook?from=rlweb"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "Receiver":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.posts]


def signed_by(secret: str, headers: dict, body: bytes) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("x-rlweb-signature", ""), expected)
