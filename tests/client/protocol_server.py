"""A small real HTTP server that speaks the logged-runs endpoints of the client's wire protocol, with its rule
that a point whose seq is not above the highest stored one is dropped as a repeat. It runs in a thread, and a test
can make it misbehave: `mode` "unavailable" answers 503, "close" closes each connection without an answer,
"lose_answer" stores a batch of points and then closes the connection instead of answering (once); `stop()` and
`start()` again listen on the same port. The client's tests use it until the real endpoints land, and beside them
for the failures a real server cannot be made to show on cue."""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

TOKEN = "rlw_0123456789_secret"
ROUTE = re.compile(r"/api/logged-runs(?:/(\d+)(?:/(points|files|finish))?)?")


class ProtocolServer:
    def __init__(self):
        self.token = TOKEN
        self.mode = "normal"
        self.unavailable_after_points = None  # answer 503 once this many points requests were answered
        self.runs: dict[int, dict] = {}
        self.requests: list[tuple[float, str, str]] = []  # (monotonic time, method, path) of every request
        self.received_seqs: list[int] = []  # every point seq that arrived, repeats included
        self.points_max_bytes = None  # when set: told in the create answer, and a larger points body gets 413
        self.points_body_sizes: list[int] = []  # of every points request, in bytes
        self.lock = threading.Lock()
        self.port = 0
        self.httpd = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> "ProtocolServer":
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.protocol = self
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def points(self, run_id: int = 1) -> list[dict]:
        with self.lock:
            return list(self.runs[run_id]["points"])

    def posts(self, path_end: str = "") -> list[str]:
        with self.lock:
            return [path for _, method, path in self.requests if method == "POST" and path.endswith(path_end)]

    def wait_for_points(self, count: int, run_id: int = 1, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while len(self.runs.get(run_id, {}).get("points", [])) < count:
            assert time.monotonic() < deadline, f"the server holds {len(self.points(run_id))} points, not {count}"
            time.sleep(0.02)

    def answer(self, handler: "Handler", method: str):
        """(status, body), or None to close the connection without answering."""
        path = urlsplit(handler.path).path
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        with self.lock:
            self.requests.append((time.monotonic(), method, path))
            if self.mode == "close":
                return None
            if self.mode == "unavailable":
                return 503, {"detail": "Service unavailable."}
            if handler.headers.get("Authorization") != f"Bearer {self.token}":
                return 401, {"detail": "Unknown API token."}
            route = ROUTE.fullmatch(path)
            if route is None:
                return 404, {"detail": "Not Found"}
            run_id, action = route.groups()
            if run_id is None:
                return self.create(json.loads(body)) if method == "POST" else (405, {"detail": "Method not allowed"})
            run = self.runs.get(int(run_id))
            if run is None:
                return 404, {"detail": "Not Found"}
            if method == "GET" and action is None:
                bound = {} if self.points_max_bytes is None else {"points_max_bytes": self.points_max_bytes}
                return 200, {"id": run["id"], "status": run["status"], "stored_through": run["stored_through"],
                             "url": run["url"], **bound}
            if action == "points":
                self.points_body_sizes.append(len(body))
                if self.points_max_bytes is not None and len(body) > self.points_max_bytes:
                    return 413, {"detail": f"a points request may take {self.points_max_bytes} bytes"}
                return self.store_points(run, json.loads(body)["points"])
            if action == "files":
                fields = multipart(handler.headers["Content-Type"], body)
                run["files"].append({"kind": fields["kind"].decode(), "step": int(fields["step"]),
                                     "content": fields["file"]})
                return 201, {"id": len(run["files"])}
            if action == "finish":
                request = json.loads(body)
                run.update(status=request["status"], finish=request)
                return 200, {"status": run["status"]}
            return 405, {"detail": "Method not allowed"}

    def create(self, request: dict):
        run_id = len(self.runs) + 1
        self.runs[run_id] = {"id": run_id, "init": request, "points": [], "stored_through": 0, "status": "running",
                             "files": [], "finish": None, "url": f"/runs/{run_id}/"}
        bound = {} if self.points_max_bytes is None else {"points_max_bytes": self.points_max_bytes}
        return 201, {"id": run_id, "experiment_id": 1, "url": f"/runs/{run_id}/", "next_seq": 1, **bound}

    def store_points(self, run: dict, points: list):
        if run["status"] != "running":
            return 409, {"detail": "This run has finished."}
        seqs = [point["seq"] for point in points]
        assert seqs == sorted(set(seqs)), "seqs strictly increasing within a request"
        self.received_seqs.extend(seqs)
        for point in points:
            if point["seq"] > run["stored_through"]:  # else a repeat: dropped
                run["points"].append(point)
                run["stored_through"] = point["seq"]
        if self.mode == "lose_answer":
            self.mode = "normal"
            return None
        answered = sum(1 for _, method, path in self.requests if path.endswith("/points"))
        if self.unavailable_after_points is not None and answered >= self.unavailable_after_points:
            self.mode = "unavailable"
        return 200, {"stored_through": run["stored_through"], "dropped": []}


def multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    return {part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
            for part in message.iter_parts()}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.reply(self.server.protocol.answer(self, "GET"))

    def do_POST(self):
        self.reply(self.server.protocol.answer(self, "POST"))

    def reply(self, answer) -> None:
        if answer is None:
            self.close_connection = True
            return
        status, body = answer
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *arguments) -> None:
        pass
