"""Many live pages at once: runs training side by side, each followed by browser-like SSE clients.

    python -m benchmarks load                                   # 4 runs, 50 clients, 120 s
    python -m benchmarks load --runs 2 --clients 10 --seconds 15
    python -m benchmarks load --database-url postgres://postgres@127.0.0.1:5432/rlweb_load   # an empty database

It starts the real stack with `python -m rlweb.devserver` (its own Redis, SQLite in a temporary folder
unless `--database-url`, one Celery worker, uvicorn) plus `--runs - 1` more workers (`celery -A rlweb
worker --pool solo`) on the same Redis and database, so that every run trains at once. It signs in over
HTTP, launches one experiment with `--runs` seeds through the new-experiment form and opens `--clients`
pages, spread over the runs and joining during the first quarter of the window. Each client does what
the run page does: GET the page, GET history.json, then follow `/runs/<id>/stream?last_id=<its last_seq>`
with the session cookie as EventSource does: it counts the `id:` of every event, checks that each one is
the previous plus one (no gap, no duplicate) and that the JSON inside carries the same `seq`, and when
its connection drops it reconnects after the server's `retry:` with `Last-Event-ID`. Every client also
drops its connection once on purpose at a random moment (`--drops`), so that resuming is measured under
load too.

After `--seconds`, the runs are cancelled through the site (POST /runs/<id>/cancel/) and the clients
read on until each gets the stream's `end` message. Then, per run: events produced (the `seq` of its
last event), stored (rows in the database; (run, seq) is unique, so stored == produced means none is
missing), and received by each of its pages (history + streamed); errors (HTTP errors, unplanned
disconnects, gaps, duplicates, wrong `seq`); and the web process's resident memory, CPU time, threads
and open files, sampled every `--sample-every` s.
"""

from __future__ import annotations

import argparse
import http.client
import http.cookiejar
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from benchmarks.dashboard import PASSWORD, REPO, USERNAME, free_port, start_site, use_site_database

RETRY_SECONDS = 2.0  # what an EventSource waits before reconnecting (the server sends `retry: 2000`)
READ_TIMEOUT = 30.0  # the server sends a heartbeat comment every 5 s: 30 s of silence is a dead stream


def site_env(var: Path, database_url: str | None) -> dict:
    """The environment the devserver hands its children, for the extra workers."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("REDIS_URL", "DATABASE_URL") and not key.startswith("RLWEB_")}
    if database_url:
        env["DATABASE_URL"] = database_url
    return dict(env, RLWEB_VAR_DIR=str(var), REDIS_URL=f"unix://{var / 'redis.sock'}?db=0",
                DJANGO_SETTINGS_MODULE="rlweb.settings", PYTHONUNBUFFERED="1")


def start_workers(var: Path, count: int, database_url: str | None) -> list[subprocess.Popen]:
    workers = []
    for number in range(1, count + 1):
        log = (var / f"worker-{number}.log").open("w")
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "rlweb", "worker", "--pool", "solo", "--concurrency", "1",
             "--queues", "cpu,gpu", "--hostname", f"bench{number}@%h", "--without-gossip", "--without-mingle",
             "--loglevel", "INFO"],
            cwd=REPO, env=site_env(var, database_url), stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    return workers


def stop_processes(processes: list[subprocess.Popen], seconds: float = 30) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + seconds
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class Session:
    """A signed-in browser session over plain HTTP: the cookie jar, and POSTs with the CSRF token."""

    def __init__(self, base: str):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def cookie(self, name: str) -> str:
        return next(cookie.value for cookie in self.jar if cookie.name == name)

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=180) as response:
            return response.read().decode()

    def post(self, path: str, fields: dict | None = None) -> tuple[str, str]:
        """POST a form (redirects followed): the URL it lands on and that page."""
        data = urllib.parse.urlencode(dict(fields or {}, csrfmiddlewaretoken=self.cookie("csrftoken"))).encode()
        with self.opener.open(urllib.request.Request(self.base + path, data=data), timeout=180) as response:
            return response.geturl(), response.read().decode()

    def log_in(self) -> None:
        self.get("/login/")  # sets the csrftoken cookie
        self.post("/login/", {"username": USERNAME, "password": PASSWORD})
        if not any(cookie.name == "sessionid" for cookie in self.jar):
            raise SystemExit("could not sign in: no session cookie")


@dataclass
class Client:
    """One live page following one run's stream, as EventSource does."""

    number: int
    run_id: int
    address: tuple[str, int]
    cookie: str
    join_at: float  # time.monotonic() at which it opens the page
    drop_at: float | None  # when it drops its connection once on purpose (None: never)
    give_up_at: float
    history_seq: int = 0  # the last event the page's stored history held
    last_seq: int = 0
    delivered: int = 0  # events received from the stream
    connections: int = 0
    planned_drops: int = 0
    gaps: int = 0
    duplicates: int = 0
    errors: list[str] = field(default_factory=list)
    end: str | None = None  # the status in the stream's `end` message
    ended_at: float | None = None

    def follow(self) -> None:
        time.sleep(max(0.0, self.join_at - time.monotonic()))
        try:
            self.open_page()
        except (OSError, http.client.HTTPException, ValueError) as error:
            self.errors.append(f"opening the page: {type(error).__name__}: {error}")
            return
        while self.end is None and time.monotonic() < self.give_up_at:
            try:
                self.read_stream()
            except (OSError, http.client.HTTPException) as error:
                self.errors.append(f"{type(error).__name__}: {error}")
            if self.end is None:
                time.sleep(RETRY_SECONDS)
        if self.end is None:
            self.errors.append("no end message before giving up")

    def open_page(self) -> None:
        """What the run page does first: load, fetch the stored history, follow the stream after its last_seq."""
        self.get(f"/runs/{self.run_id}/")
        history = json.loads(self.get(f"/runs/{self.run_id}/history.json"))
        self.history_seq = self.last_seq = history["last_seq"]

    def get(self, path: str) -> bytes:
        connection = http.client.HTTPConnection(*self.address, timeout=READ_TIMEOUT)
        try:
            connection.request("GET", path, headers={"Cookie": self.cookie})
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise ValueError(f"HTTP {response.status} for {path}")
            return body
        finally:
            connection.close()

    def read_stream(self) -> None:
        """One connection: read messages until the end message, a planned drop, or the server closes it."""
        connection = http.client.HTTPConnection(*self.address, timeout=READ_TIMEOUT)
        try:
            headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache", "Cookie": self.cookie}
            if self.last_seq:
                headers["Last-Event-ID"] = str(self.last_seq)
            connection.request("GET", f"/runs/{self.run_id}/stream?last_id={self.history_seq}", headers=headers)
            response = connection.getresponse()
            self.connections += 1
            if response.status != 200:
                self.errors.append(f"HTTP {response.status}")
                return
            buffer = b""
            while self.end is None:
                if self.drop_at is not None and time.monotonic() >= self.drop_at:
                    self.drop_at = None
                    self.planned_drops += 1
                    return
                chunk = response.read1(65536)
                if not chunk:
                    self.errors.append(f"disconnected after seq {self.last_seq}")
                    return
                *messages, buffer = (buffer + chunk).split(b"\n\n")
                for message in messages:
                    self.take(message.decode())
        finally:
            connection.close()

    def take(self, message: str) -> None:
        fields = {}
        for line in message.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
        if fields.get("event") == "end":
            self.end = json.loads(fields["data"])["status"]
            self.ended_at = time.monotonic()
        elif "id" in fields:
            seq = int(fields["id"])
            if seq <= self.last_seq:
                self.duplicates += 1
                return
            if seq != self.last_seq + 1:
                self.gaps += 1
                self.errors.append(f"gap: {self.last_seq} then {seq}")
            if json.loads(fields["data"])["seq"] != seq:
                self.errors.append(f"id {seq} carries another seq")
            self.last_seq = seq
            self.delivered += 1


class MemorySampler(threading.Thread):
    """Resident memory and CPU time of one process every `interval` seconds: (seconds since start, bytes, CPU s);
    also its threads and open files (sockets included), which would grow with a leak of connections."""

    def __init__(self, pid: int, interval: float):
        super().__init__(daemon=True)
        import psutil

        self.process = psutil.Process(pid)
        self.interval = interval
        self.samples: list[tuple[float, int, float]] = []
        self.handles: list[tuple[int, int]] = []  # (threads, open file descriptors)
        self.stopped = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while True:
            self.sample(started)
            if self.stopped.wait(self.interval):
                self.sample(started)  # the last one: the moment it is stopped
                return

    def sample(self, started: float) -> None:
        cpu = self.process.cpu_times()
        self.samples.append((time.monotonic() - started, self.process.memory_info().rss, cpu.user + cpu.system))
        self.handles.append((self.process.num_threads(), self.process.num_fds()))


def web_server_pid(devserver_pid: int) -> int:
    import psutil

    for child in psutil.Process(devserver_pid).children(recursive=True):
        if "uvicorn" in " ".join(child.cmdline()):
            return child.pid
    raise SystemExit("no uvicorn process under the devserver")


class FormFields(HTMLParser):
    """The values a browser would submit from a page's first form with its initial values."""

    def __init__(self):
        super().__init__()
        self.values: dict[str, str] = {}
        self.select: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        name = attrs.get("name")
        if tag == "input" and name and (attrs.get("type") not in ("checkbox", "radio") or "checked" in attrs):
            self.values[name] = attrs.get("value") or ("on" if attrs.get("type") == "checkbox" else "")
        elif tag == "select":
            self.select = name
        elif tag == "option" and self.select and (self.select not in self.values or "selected" in attrs):
            self.values[self.select] = attrs.get("value", "")
        elif tag == "textarea" and name:
            self.textarea, self.values[name] = name, ""

    def handle_endtag(self, tag):
        if tag == "select":
            self.select = None
        elif tag == "textarea":
            self.textarea = None

    def handle_data(self, data):
        if self.textarea:
            self.values[self.textarea] += data


def launch(session: Session, args) -> list:
    """Launch one experiment with a seed per run through the new-experiment form; its runs, in seed order."""
    from rlweb.experiments.models import Run

    path = f"/experiments/new/?algorithm={args.algorithm}"
    reader = FormFields()
    reader.feed(session.get(path))
    fields = dict(reader.values, name=f"load {args.algorithm} x{args.runs}", algorithm=args.algorithm,
                  env_id=args.env_id, num_seeds=args.runs, total_steps=args.total_steps,
                  eval_interval=args.eval_interval, eval_episodes=2, checkpoint_interval=0, video_interval=0,
                  device="cpu")
    landed, page = session.post(path, fields)
    found = re.search(r"/experiments/(\d+)/$", landed)
    if not found:
        errors = re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', page, re.DOTALL)
        raise SystemExit(f"the new-experiment form did not launch the runs ({landed}): "
                         f"{[re.sub('<[^>]+>', ' ', error).strip() for error in errors] or page[-2000:]}")
    return list(Run.objects.filter(experiment_id=int(found.group(1))).order_by("seed"))


def create_user() -> None:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get_or_create(username=USERNAME)[0]
    user.set_password(PASSWORD)
    user.save()


def wait_until_running(runs: list, seconds: float) -> dict[int, str]:
    from rlweb.experiments.models import Run

    deadline = time.monotonic() + seconds
    while True:
        status = dict(Run.objects.filter(pk__in=[run.pk for run in runs]).values_list("pk", "status"))
        if all(value != Run.Status.QUEUED for value in status.values()) or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def megabytes(value: float) -> str:
    return f"{value / 2**20:.1f}"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks load")
    parser.add_argument("--runs", type=int, default=4, help="runs training at once (one worker each)")
    parser.add_argument("--clients", type=int, default=50, help="SSE clients, spread over the runs")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the runs train with clients on")
    parser.add_argument("--algorithm", default="ppo")
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--total-steps", type=int, default=10**7, help="per run: more than it reaches in the window")
    parser.add_argument("--eval-interval", type=int, default=2000, help="env steps between evaluations")
    parser.add_argument("--drops", type=int, default=1, choices=(0, 1),
                        help="connections each client drops on purpose and resumes with Last-Event-ID")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between memory samples")
    parser.add_argument("--database-url", help="an empty database for the site instead of SQLite, e.g. "
                                                  "postgres://user@127.0.0.1:5432/rlweb_load (as docker-compose has)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--seed", type=int, default=0, help="for the clients' join and drop times")
    args = parser.parse_args(argv)

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="rlweb-load-") as folder:
        var = Path(folder)
        print(f"starting the stack in {var} with {args.runs} workers", flush=True)
        server = start_site(var, port, args.database_url)
        workers = start_workers(var, args.runs - 1, args.database_url)
        try:
            if args.database_url:
                os.environ["DATABASE_URL"] = args.database_url
            use_site_database(var)
            memory = MemorySampler(web_server_pid(server.pid), args.sample_every)
            memory.start()
            create_user()
            session = Session(base)
            session.log_in()
            runs = launch(session, args)
            launched_at = time.monotonic()
            cookie = f"sessionid={session.cookie('sessionid')}"
            summary = report(run_clients(args, runs, launched_at, session, cookie, port), runs, memory, args, server,
                             workers)
            if args.json:
                args.json.write_text(json.dumps(summary, indent=1))
        finally:
            stop_processes(workers)
            stop_processes([server], seconds=60)


def run_clients(args, runs: list, launched_at: float, session: Session, cookie: str, port: int) -> dict:
    """Open the clients, let the runs train for the window, cancel them, and wait for every end message."""
    noise = random.Random(args.seed)
    started = time.monotonic()
    window_end = started + args.seconds
    clients = [Client(number, runs[number % len(runs)].pk, ("127.0.0.1", port), cookie,
                      join_at=started + noise.uniform(0, args.seconds / 4),
                      drop_at=started + noise.uniform(args.seconds / 4, args.seconds * 3 / 4) if args.drops else None,
                      give_up_at=window_end + 180)
               for number in range(args.clients)]
    threads = [threading.Thread(target=client.follow, daemon=True) for client in clients]
    for thread in threads:
        thread.start()
    status = wait_until_running(runs, args.seconds)
    running_after = time.monotonic() - launched_at
    print(f"{sum(value == 'running' for value in status.values())} of {len(runs)} runs training "
          f"{running_after:.1f} s after launch; {args.clients} clients joining over {args.seconds / 4:.0f} s",
          flush=True)
    time.sleep(max(0.0, window_end - time.monotonic()))
    cancelled_at = time.monotonic()
    cancel_errors = []
    for run in runs:
        try:
            session.post(f"/runs/{run.pk}/cancel/")
        except OSError as error:  # urllib's HTTPError and URLError too
            cancel_errors.append(f"cancel of run {run.pk}: {type(error).__name__}: {error}")
    cancel_seconds = time.monotonic() - cancelled_at
    for thread in threads:
        thread.join(timeout=max(0.1, window_end + 200 - time.monotonic()))
    return {"clients": clients, "running_after": running_after, "cancelled_at": cancelled_at,
            "cancel_errors": cancel_errors, "cancel_seconds": cancel_seconds,
            "window": cancelled_at - started, "load": os.getloadavg()[1]}


def wait_until_finished(runs: list, seconds: float) -> dict[int, str]:
    """Statuses once no run is queued or running (the task records the status just after the end event)."""
    from rlweb.experiments.models import Run

    deadline = time.monotonic() + seconds
    while True:
        status = dict(Run.objects.filter(pk__in=[run.pk for run in runs]).values_list("pk", "status"))
        if all(value in Run.FINISHED for value in status.values()) or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def span(values: list[int]) -> str:
    return f"{min(values)}" if min(values) == max(values) else f"{min(values)}-{max(values)}"


def report(outcome: dict, runs: list, memory: MemorySampler, args, server, workers) -> dict:
    from django.db.models import Count, Max

    from rlweb.experiments.models import Event, Run

    status = wait_until_finished(runs, 60)
    time.sleep(2)  # every page has its end message: let the web server close their requests
    memory.stopped.set()
    memory.join()
    clients = outcome["clients"]
    stored = {row["run_id"]: row for row in Event.objects.filter(run__in=runs).values("run_id").annotate(
        count=Count("id"), last=Max("seq"))}
    print(f"\n{len(runs)} {args.algorithm} {args.env_id} runs, {len(clients)} clients, "
          f"{outcome['window']:.0f} s window (then cancel; clients read on to the end message); "
          f"{os.cpu_count()} CPUs, load average {outcome['load']:.1f} over the last 5 minutes")
    print(f"{'run':>4} {'status':>9} {'produced':>8} {'stored':>6} {'clients':>7} {'history':>9} {'streamed':>9} "
          f"{'received':>8} {'reconnects':>10} {'errors':>6} {'end after cancel':>16}")
    all_equal, error_count, streamed_total = True, 0, 0
    for run in runs:
        mine = [client for client in clients if client.run_id == run.pk]
        produced, count = stored.get(run.pk, {}).get("last") or 0, stored.get(run.pk, {}).get("count", 0)
        received = [client.history_seq + client.delivered for client in mine]
        all_equal &= count == produced and set(received) == {produced} and all(
            client.last_seq == produced for client in mine)
        errors = sum(len(client.errors) + client.duplicates for client in mine)
        error_count += errors
        streamed_total += sum(client.delivered for client in mine)
        ends = [client.ended_at - outcome["cancelled_at"] for client in mine if client.ended_at]
        print(f"{run.pk:>4} {status[run.pk]:>9} {produced:>8} {count:>6} {len(mine):>7} "
              f"{span([c.history_seq for c in mine]):>9} {span([c.delivered for c in mine]):>9} "
              f"{span(received):>8} {sum(c.connections - 1 for c in mine):>10} {errors:>6} "
              f"{f'{max(ends):.1f} s' if ends else '-':>16}")
    failing = [client for client in clients if client.errors or client.duplicates
               or client.last_seq != stored.get(client.run_id, {}).get("last")]
    if len(failing) > 10:
        print(f"  {len(failing)} clients did not receive every event or saw errors; the first 10:")
    for client in failing[:10]:
        print(f"  client {client.number} (run {client.run_id}): history to {client.history_seq}, streamed "
              f"{client.delivered}, last seq {client.last_seq}, {client.connections} connections "
              f"({client.planned_drops} planned drops), {client.duplicates} duplicates, end {client.end}; "
              f"errors: {client.errors[:3]}{f' and {len(client.errors) - 3} more' if len(client.errors) > 3 else ''}")
    print("(history: the last seq of the history.json each page drew first; streamed: events it then got over SSE;"
          "\n received = history + streamed, which must equal produced and stored for every client)")
    print(f"{len(runs)} cancel POSTs answered in {outcome['cancel_seconds']:.1f} s; errors: "
          f"{outcome['cancel_errors'] or 'none'}")
    error_count += len(outcome["cancel_errors"])
    print(f"streamed {streamed_total} events in all ({streamed_total / outcome['window']:.0f} events/s to the "
          f"clients); planned drops resumed with Last-Event-ID: {sum(c.planned_drops for c in clients)}")

    samples = memory.samples
    series = " ".join(f"{seconds:.0f}s:{megabytes(rss)}" for seconds, rss, _ in samples)
    # halfway: every client has long joined and the streams are warm (in a 10 s window a quarter in is not yet:
    # RSS still rose 10-15% after it on a loaded machine, then stayed flat)
    settled = samples[min(len(samples) - 1, len(samples) // 2)][1]
    start, end, peak = samples[0][1], samples[-1][1], max(rss for _, rss, _ in samples)
    later = samples[len(samples) // 2:]  # the second half: a leak shows as a steady slope there
    slope = statistics.linear_regression([t for t, _, _ in later], [rss for _, rss, _ in later]).slope * 60 if len(
        later) >= 2 else 0.0
    busy = (samples[-1][2] - samples[0][2]) / max(1e-9, samples[-1][0] - samples[0][0])
    flat = end <= settled * 1.10
    print(f"web process (uvicorn) RSS in MB every {args.sample_every:.0f} s: {series}")
    print(f"web RSS: start {megabytes(start)} MB, halfway {megabytes(settled)} MB, end {megabytes(end)} MB, "
          f"max {megabytes(peak)} MB, {megabytes(slope)} MB/min over the second half ({'flat' if flat else 'GROWING'}: "
          f"end within 10% of the value halfway); "
          f"web CPU {samples[-1][2] - samples[0][2]:.1f} s in {samples[-1][0]:.0f} s ({busy:.0%} of a core)")
    quarter = len(samples) // 4
    print("web threads / open files: " + ", ".join(f"{label} {memory.handles[index][0]} / {memory.handles[index][1]}"
                                                   for label, index in (("start", 0), ("a quarter in", quarter),
                                                                        ("half", len(samples) // 2),
                                                                        ("end, every page closed", -1))))
    crashed = [name for name, process in [("devserver", server)] + [(f"worker {n}", w) for n, w in enumerate(
        workers, 1)] if process.poll() is not None]
    ok = all_equal and not error_count and flat and not crashed and all(
        value == Run.Status.CANCELLED for value in status.values())
    print(f"VERDICT: {'OK' if ok else 'FAIL'}: {len(clients)} clients on {len(runs)} runs; "
          f"{'every client received every produced event, each stored' if all_equal else 'received/stored/produced differ'}"
          f"; {error_count} errors; web memory {'flat' if flat else 'growing'}; runs ended "
          f"{', '.join(sorted(set(status.values())))}{'; processes died: ' + ', '.join(crashed) if crashed else ''}",
          flush=True)
    return {"ok": ok, "runs": {run.pk: {"status": status[run.pk], "produced": stored.get(run.pk, {}).get("last") or 0,
                                        "stored": stored.get(run.pk, {}).get("count", 0)} for run in runs},
            "clients": [{"run": c.run_id, "history_seq": c.history_seq, "streamed": c.delivered, "last_seq": c.last_seq,
                         "connections": c.connections, "planned_drops": c.planned_drops, "duplicates": c.duplicates,
                         "errors": c.errors, "end": c.end} for c in clients],
            "cancel_errors": outcome["cancel_errors"], "died": crashed,
            "web_rss": [[round(seconds, 1), rss] for seconds, rss, _ in samples]}
