"""Scripts logging through rlweb_client at once, into a live server on PostgreSQL, with their run pages open.

    python -m benchmarks client_logging                          # 10 clients x 1,000 points/s for 20 s
    python -m benchmarks client_logging --clients 4 --points-per-second 500 --seconds 10
    python -m benchmarks client_logging --profile                # the web server under py-spy (.venv/bin/py-spy)
    python -m benchmarks client_logging --costs                  # CPU per request, in this process alone

It creates a fresh database on the PostgreSQL server at `--postgres` (dropped after), migrates it, and starts the
web server as deployed (uvicorn rlweb.asgi:application with `--workers` processes, as WEB_CONCURRENCY sets in
docker-compose.yml) on it and on the Redis at `--redis-url` (a db of its own: flushed first). Each of `--clients`
processes is a script: `rlweb_client.init` with a token of its own (client/ on PYTHONPATH, as installed), then
`run.log()` of a point with three metrics `--points-per-second` times a second for `--seconds`, then `run.finish()`.
The scripts run at a lower priority (`--client-nice`, 10): in a lab they train on other machines than the dashboard,
and on a machine of 2 cores ten of them at full priority would take the CPU the server needs to take their points. Every point carries its log time (`bench/logged_at`, the wall clock when log()
was called). Meanwhile one reader per run follows the run page's live stream (`/runs/<id>/stream`, signed in with a
session cookie, as the page's EventSource does), and one more page fetches a run's `history.json` (what the run page
loads first) every half second.

Measured, all on one machine's wall clock:
- stored: the points' Event rows in the database after the runs finished, against the points logged; points stored
  per second over the window from the first log() to the last point's answer;
- lag from log() to stored: for each point, the time the server's answer to the request that carried it reached the
  client (the server answers after the transaction that stored it commits) minus its log time: an upper bound of the
  true lag by one answer's trip over localhost. The client holds points up to half a second (its batching) first;
- live latency: the time from a point's answer to its arrival on its run's live stream (the stream is fed right
  after the commit, so this can be a little negative: the stream beat the answer), and from log() to the stream;
- history.json: its response time under the load (p50/p95), fetched by a process of its own (a browser's).
Targets from issue 28: every point stored, lag p95 under 1 s, page p95 under 100 ms.

`--costs` measures what the server spends per request without the load, the machine's noise aside (CPU time, not
wall time): a points request of 500 points through the API (Django's test client, no uvicorn) into a run until it
holds `--cost-points` points, its PostgreSQL backend's CPU beside it, then history.json of that run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

from benchmarks.dashboard import REPO, free_port, percentile

CLIENT = REPO / "client"
READ_TIMEOUT = 30.0


# --- one script (a process of its own) ------------------------------------------------------------------------

def client_main(argv: list[str]) -> None:
    """`--client URL TOKEN NAME RATE SECONDS START OUT`: log at RATE points a second from the wall time START."""
    url, token, name, rate, seconds, start, out = argv
    rate, seconds, start = float(rate), float(seconds), float(start)
    import rlweb_client

    run = rlweb_client.init(url, token, experiment="client-logging-benchmark", name=name,
                            config={"total_timesteps": int(rate * seconds)})
    acked: list[tuple[float, float]] = []  # (logged_at, answered_at) of every point stored
    send = run.api.post

    def recording_post(path, body):
        answer = send(path, body)
        if path.endswith("/points"):
            now = time.time()
            acked.extend((point["values"]["bench/logged_at"], now) for point in body["points"])
        return answer

    run.api.post = recording_post
    noise = random.Random(name)
    time.sleep(max(0.0, start - time.time()))
    count = int(rate * seconds)
    for index in range(count):
        ahead = start + index / rate - time.time()
        if ahead > 0.002:
            time.sleep(ahead)
        run.log({"charts/episodic_return": 500 * (1 - math.exp(-index / 5000)) + noise.gauss(0, 20),
                 "losses/value_loss": noise.expovariate(1.0), "bench/logged_at": time.time()}, step=index)
    logged_for = time.time() - start
    run.finish(timeout=120)
    Path(out).write_text(json.dumps({"run": run.id, "logged": count, "logged_for": logged_for, "acked": acked,
                                     "offline": str(run.offline_path or "")}))


# --- the run pages -----------------------------------------------------------------------------------------

class StreamReader(threading.Thread):
    """A run page's live stream: the arrival time of each point, by its log time."""

    def __init__(self, address: tuple[str, int], cookie: str, run_id: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.address, self.cookie, self.run_id, self.stop = address, cookie, run_id, stop
        self.arrived: dict[float, float] = {}
        self.errors: list[str] = []
        self.last_seq = 0
        self.ended = False

    def run(self) -> None:
        while not self.stop.is_set() and not self.ended:
            try:
                self.follow()
            except (OSError, http.client.HTTPException) as error:
                self.errors.append(f"{type(error).__name__}: {error}")
                time.sleep(1)

    def follow(self) -> None:
        connection = http.client.HTTPConnection(*self.address, timeout=READ_TIMEOUT)
        try:
            connection.request("GET", f"/runs/{self.run_id}/stream?last_id={self.last_seq}",
                               headers={"Accept": "text/event-stream", "Cookie": self.cookie})
            response = connection.getresponse()
            if response.status != 200:
                self.errors.append(f"HTTP {response.status}")
                time.sleep(1)
                return
            buffer = b""
            while not self.stop.is_set() and not self.ended:
                chunk = response.read1(65536)
                if not chunk:
                    return
                now = time.time()
                *messages, buffer = (buffer + chunk).split(b"\n\n")
                for message in messages:
                    self.take(message.decode(), now)
        finally:
            connection.close()

    def take(self, message: str, now: float) -> None:
        for line in message.split("\n"):
            if line.startswith("event:") and line.split(":", 1)[1].strip() == "end":
                self.ended = True
            elif line.startswith("data:"):
                record = json.loads(line[5:])
                if isinstance(record, dict) and "seq" in record:
                    self.last_seq = max(self.last_seq, record["seq"])
                    logged_at = (record.get("values") or {}).get("bench/logged_at")
                    if logged_at is not None:
                        self.arrived.setdefault(logged_at, now)


def fetch_histories(address: tuple[str, int], cookie: str, run_ids: list[int], stop: threading.Event,
                    times: list[float], errors: list[str]) -> None:
    """The run page's first request, for each run in turn, every half second."""
    index = 0
    while not stop.wait(0.5):
        connection = http.client.HTTPConnection(*address, timeout=READ_TIMEOUT)
        started = time.perf_counter()
        try:
            connection.request("GET", f"/runs/{run_ids[index % len(run_ids)]}/history.json",
                               headers={"Cookie": cookie})
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                times.append(time.perf_counter() - started)
            else:
                errors.append(f"history.json: HTTP {response.status}")
        except (OSError, http.client.HTTPException) as error:
            errors.append(f"history.json: {error}")
        finally:
            connection.close()
        index += 1


def history_page(address: tuple[str, int], cookie: str, run_ids: list[int], stop, results) -> None:
    """(A process of its own.) `fetch_histories` until `stop` is set, then its times and errors into `results`."""
    times, errors, done = [], [], threading.Event()
    watcher = threading.Thread(target=lambda: (stop.wait(), done.set()), daemon=True)
    watcher.start()
    fetch_histories(address, cookie, run_ids, done, times, errors)
    results.put((times, errors))


# --- the server --------------------------------------------------------------------------------------------

def fresh_database(postgres: str) -> str:
    import psycopg

    name = f"rlweb_client_logging_{os.getpid()}"
    with psycopg.connect(postgres, autocommit=True) as connection:
        connection.execute(f'create database "{name}"')
    return urllib.parse.urlsplit(postgres)._replace(path=f"/{name}").geturl()


def drop_database(postgres: str, database_url: str) -> None:
    import psycopg

    name = urllib.parse.urlsplit(database_url).path.lstrip("/")
    with psycopg.connect(postgres, autocommit=True) as connection:
        connection.execute(f'drop database if exists "{name}" with (force)')


def prepare(count: int) -> tuple[list[str], str]:
    """(In this process, Django on the fresh database.) A user, `count` API tokens and a session cookie."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from rlweb.api.models import ApiToken

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="a long benchmark password")
    tokens = [ApiToken.issue(user, f"client {number}")[1] for number in range(count)]
    browser = Client()
    browser.force_login(user)
    return tokens, f"sessionid={browser.cookies['sessionid'].value}"


def start_server(port: int, env: dict, profile: Path | None, workers: int = 1) -> subprocess.Popen:
    command = [sys.executable, "-m", "uvicorn", "rlweb.asgi:application", "--host", "127.0.0.1", "--port", str(port),
               "--lifespan", "off", "--timeout-graceful-shutdown", "2", "--no-server-header", "--log-level", "warning",
               "--workers", str(workers)]
    if profile:
        command = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--output", str(profile),
                   "--rate", "50", "--nolineno", "--subprocesses", "--gil", "--", *command]  # --gil: CPU, not waits
    server = subprocess.Popen(command, cwd=REPO, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/login/")
            connection.getresponse().read()
            return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the web server did not start")
            time.sleep(0.5)


def server_cpu_seconds(group: int) -> float:
    """User and system CPU seconds of the web server's processes (uvicorn and its workers) in the process group
    `group` (py-spy's, when profiled: py-spy itself left out)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group and b"py-spy" not in (proc / "cmdline").read_bytes().split(b"\0")[0]:
                total += (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, ValueError, IndexError):
            continue
    return total


def stop_server(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGINT)  # py-spy writes its profile on SIGINT; uvicorn stops on it too
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


# --- the whole ---------------------------------------------------------------------------------------------

def main(argv: list[str]) -> None:
    if argv and argv[0] == "--client":
        return client_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks client_logging")
    parser.add_argument("--clients", type=int, default=10, help="scripts logging at once, one run each")
    parser.add_argument("--points-per-second", type=float, default=1000.0, help="per client")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/test",
                        help="a PostgreSQL server (any database on it): the benchmark creates and drops its own")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14", help="a Redis db of its own: flushed")
    parser.add_argument("--profile", action="store_true", help="record the web server with py-spy")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn's worker processes (WEB_CONCURRENCY)")
    parser.add_argument("--client-nice", type=int, default=10, help="the scripts' niceness (0: the server's)")
    parser.add_argument("--pool", default=True, action=argparse.BooleanOptionalAction,
                        help="the server's pool of PostgreSQL connections (RLWEB_DATABASE_POOL, as docker-compose)")
    parser.add_argument("--costs", action="store_true", help="CPU per request in this process, without the load")
    parser.add_argument("--cost-points", type=int, default=200_000, help="the run --costs fills, and reads")
    args = parser.parse_args(argv)

    database_url = fresh_database(args.postgres)
    try:
        (measure_costs if args.costs else run_benchmark)(args, database_url)
    finally:
        drop_database(args.postgres, database_url)


def run_benchmark(args, database_url: str) -> None:
    import redis

    redis.Redis.from_url(args.redis_url).flushdb()
    env = {key: value for key, value in os.environ.items() if not key.startswith("RLWEB_")}
    env.update(DATABASE_URL=database_url, REDIS_URL=args.redis_url, DJANGO_SETTINGS_MODULE="rlweb.settings",
               RLWEB_API_RATE_PER_MINUTE="100000", RLWEB_DATABASE_POOL=str(args.pool), PYTHONPATH=os.pathsep.join([str(CLIENT), str(REPO)]))
    os.environ.update(DATABASE_URL=database_url, REDIS_URL=args.redis_url, DJANGO_SETTINGS_MODULE="rlweb.settings")
    tokens, cookie = prepare(args.clients)
    from rlweb.experiments.models import Event, Run

    port = free_port()
    profile = Path(tempfile.mkdtemp()) / "web.txt" if args.profile else None
    server = start_server(port, env, profile, args.workers)
    url = f"http://127.0.0.1:{port}/"
    folder = Path(tempfile.mkdtemp(prefix="client-logging-"))
    try:
        start = time.time() + 8  # every client has made its run by then (Python and the client start)
        clients = [subprocess.Popen([sys.executable, "-m", "benchmarks", "client_logging", "--client", url, token,
                                     f"client {number}", str(args.points_per_second), str(args.seconds), str(start),
                                     str(folder / f"{number}.json")], cwd=folder, env=env, stdout=subprocess.DEVNULL,
                                    preexec_fn=lambda: os.nice(args.client_nice))
                   for number, token in enumerate(tokens)]
        while Run.objects.count() < args.clients:
            if time.time() > start or any(client.poll() for client in clients):
                raise SystemExit(f"only {Run.objects.count()} of {args.clients} clients made their run in time")
            time.sleep(0.2)
        run_ids = list(Run.objects.order_by("pk").values_list("pk", flat=True))
        stop = threading.Event()
        readers = [StreamReader(("127.0.0.1", port), cookie, run_id, stop) for run_id in run_ids]
        # the page that loads history.json in a process of its own, as a browser is: timed without waiting for this
        # one's GIL, which the readers of 10,000 events a second hold often
        fork = multiprocessing.get_context("fork")
        page_stop, page_results = fork.Event(), fork.Queue()
        pages = fork.Process(target=history_page, daemon=True,
                             args=(("127.0.0.1", port), cookie, run_ids, page_stop, page_results))
        for reader in readers:
            reader.start()
        pages.start()
        load_before = os.getloadavg()[0]
        time.sleep(max(0.0, start - time.time()))
        cpu_before = server_cpu_seconds(server.pid)
        for client in clients:
            client.wait(timeout=args.seconds + 300)
        cpu = (server_cpu_seconds(server.pid) - cpu_before, time.time() - start)
        time.sleep(2)  # the streams' last events
        stop.set()
        page_stop.set()
        history_times, history_errors = page_results.get(timeout=READ_TIMEOUT + 10)
        load_after = os.getloadavg()[0]
    finally:
        stop_server(server)
    results = [json.loads((folder / f"{number}.json").read_text()) for number in range(args.clients)]
    shutil.rmtree(folder, ignore_errors=True)
    report(args, results, readers, history_times, history_errors, Event, (load_before, load_after), cpu)
    if profile:
        print_profile(profile)


def measure_costs(args, database_url: str) -> None:
    """`--costs`: the CPU of points requests (500 points each) into one run, and of history.json on it."""
    import redis
    from django.conf import settings
    from django.db import connection
    from django.test import Client

    redis.Redis.from_url(args.redis_url).flushdb()
    os.environ.update(DATABASE_URL=database_url, REDIS_URL=args.redis_url, DJANGO_SETTINGS_MODULE="rlweb.settings",
                      RLWEB_API_RATE_PER_MINUTE="100000000")
    (token,), _ = prepare(1)
    from django.contrib.auth import get_user_model

    settings.ALLOWED_HOSTS = ["*"]
    script = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    page = Client()
    page.force_login(get_user_model().objects.get(username="bench"))
    answer = script.post("/api/logged-runs", {"experiment": "costs"}, content_type="application/json")
    run_id = answer.json()["id"]
    with connection.cursor() as cursor:
        cursor.execute("select pg_backend_pid()")
        backend = Path(f"/proc/{cursor.fetchone()[0]}/stat")  # PostgreSQL on this machine: its CPU too

    def backend_cpu() -> float:
        try:
            fields = backend.read_text().rsplit(")", 1)[1].split()
        except OSError:
            return math.nan
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    noise, batch, seq, cpu, backend_used = random.Random(0), 500, 0, [], 0.0
    while seq < args.cost_points:
        points = [{"seq": seq + index, "step": seq + index, "time": (seq + index) / 1000,
                   "values": {"charts/episodic_return": noise.gauss(0, 20), "losses/value_loss": noise.expovariate(1),
                              "bench/logged_at": time.time()}} for index in range(1, batch + 1)]
        body = json.dumps({"points": points})
        started, backend_started = time.process_time(), backend_cpu()
        answer = script.post(f"/api/logged-runs/{run_id}/points", body, content_type="application/json")
        cpu.append(time.process_time() - started)
        backend_used += backend_cpu() - backend_started
        assert answer.status_code == 200, answer.content
        seq += batch
    reads = []
    for _ in range(20):
        started = time.process_time()
        answer = page.get(f"/runs/{run_id}/history.json")
        reads.append(time.process_time() - started)
        assert answer.status_code == 200, answer.content
    ms = lambda values, fraction: f"{percentile(values, fraction) * 1000:.1f} ms"
    print(f"\nCPU time in this process (Django's test client: the web server's work but uvicorn's), one run filled to "
          f"{seq} points by requests of {batch}; load average {os.getloadavg()[0]:.1f}")
    rows = [
        ("a points request of 500, p50", ms(cpu, 0.5)),
        ("... p95", ms(cpu, 0.95)),
        ("web CPU per 1,000 points", f"{sum(cpu) / seq * 1000 * 1000:.1f} ms"),
        ("PostgreSQL CPU per 1,000 points", f"{backend_used / seq * 1000 * 1000:.1f} ms"),
        (f"history.json at {seq} points, p50", ms(reads, 0.5)),
        (f"history.json at {seq} points, p95", ms(reads, 0.95)),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:{width}}  {value:>10}")


def report(args, results, readers, history_times, history_errors, Event, loads, cpu) -> None:
    by_run = {reader.run_id: reader for reader in readers}
    logged = sum(result["logged"] for result in results)
    stored = Event.objects.filter(run__in=[result["run"] for result in results], kind="train").count()
    acked = [pair for result in results for pair in result["acked"]]
    window = max(answered for _, answered in acked) - min(logged_at for logged_at, _ in acked)
    lags = [answered - logged_at for logged_at, answered in acked]
    to_stream, log_to_stream, missing = [], [], 0
    for result in results:
        arrived = by_run[result["run"]].arrived
        for logged_at, answered in result["acked"]:
            if logged_at in arrived:
                to_stream.append(arrived[logged_at] - answered)
                log_to_stream.append(arrived[logged_at] - logged_at)
            else:
                missing += 1
    rate = min(result["logged"] / result["logged_for"] for result in results)
    ms = lambda values, fraction: f"{percentile(values, fraction) * 1000:.0f} ms" if values else "-"
    print(f"\n{args.clients} clients x {args.points_per_second:.0f} points/s for {args.seconds:.0f} s into "
          f"PostgreSQL; {os.cpu_count()} CPUs shared with other work, load average {loads[0]:.1f} before the "
          f"clients ended, {loads[1]:.1f} after; each client logged at {rate:.0f} points/s or more, at nice "
          f"{args.client_nice} (in a lab the scripts run on other machines); the web server: uvicorn with "
          f"{args.workers} worker process{'es' if args.workers != 1 else ''}"
          f"{', a pool of database connections' if args.pool else ''}")
    rows = [
        ("points logged", f"{logged}", ""),
        ("points stored", f"{stored} ({stored - logged:+d})", "all"),
        ("stored per second", f"{stored / window:.0f}", f"{args.clients * args.points_per_second:.0f}"),
        ("lag log() -> stored, p50", ms(lags, 0.5), ""),
        ("lag log() -> stored, p95", ms(lags, 0.95), "< 1000 ms"),
        ("lag log() -> stored, max", f"{max(lags) * 1000:.0f} ms", ""),
        ("stored -> live stream, p50", ms(to_stream, 0.5), ""),
        ("stored -> live stream, p95", ms(to_stream, 0.95), "< 100 ms"),
        ("log() -> live stream, p95", ms(log_to_stream, 0.95), ""),
        ("points not seen on a stream", f"{missing}", "0"),
        ("history.json, p50", ms(history_times, 0.5), ""),
        ("history.json, p95", ms(history_times, 0.95), "< 100 ms"),
        ("history.json requests", f"{len(history_times)}", ""),
        ("web server CPU while logging", f"{cpu[0]:.0f} s in {cpu[1]:.0f} s", ""),
    ]
    width = max(len(name) for name, _, _ in rows)
    print(f"{'':{width}}  {'measured':>16}  target")
    for name, value, target in rows:
        print(f"{name:{width}}  {value:>16}  {target}")
    problems = [error for reader in readers for error in reader.errors] + history_errors
    problems += [f"client went offline: {result['offline']}" for result in results if result["offline"]]
    if problems:
        print(f"errors ({len(problems)}): {'; '.join(problems[:10])}")


def print_profile(profile: Path) -> None:
    """py-spy's raw output (one line per distinct stack, with its sample count): the heaviest frames of ours."""
    own: dict[str, int] = {}
    total = 0
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        samples = int(count)
        total += samples
        for frame in set(stack.split(";")):
            own[frame] = own.get(frame, 0) + samples
    print(f"\nweb server profile ({profile}, py-spy's raw format): {total} samples of the thread holding the GIL; "
          f"frames by the share of samples they appear in:")
    for frame, samples in sorted(own.items(), key=lambda item: -item[1])[:40]:
        print(f"{samples / total:6.1%}  {frame}")
