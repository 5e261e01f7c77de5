"""The run page with long and live runs, in the real browser against the real stack.

    python -m benchmarks dashboard                      # 1,000,000 events per metric, live at 100 events/s
    python -m benchmarks dashboard --events=100000 --live-seconds=10 --opens=3
    python -m benchmarks dashboard --var-dir=/tmp/rlweb-bench   # keeps the filled database for the next time
    python -m benchmarks dashboard --load-workers=10 --database-url=postgres://postgres@127.0.0.1:5432/rlweb_bench
        # on PostgreSQL (an empty database), while 10 workers report 100 events/s each (benchmarks/sink_load.py)

It starts `python -m rlweb.devserver` (its own Redis, SQLite in a temporary folder, worker, uvicorn) and
works on that database from this process:

- open time: a run whose episode, train and eval events each number `--events` (each metric key as
  many values), persisted the way a worker persists them (RedisSink.flush, which keeps the downsampled
  summary), then opened `--opens` times in chromium: milliseconds from navigation start until every
  chart is drawn (the page's `run-page-drawn` mark);
- live latency: a running run with the page open; this process emits events with RedisSink.emit at
  `--rate` events/s, and the page reports when each one's points are on screen (the `run-page:drawn`
  event, after the next animation frame). Latency is that moment minus the moment emit was called
  (both wall clock on this machine).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
USERNAME, PASSWORD = "bench", "a long benchmark password 3"


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on now, for the site a benchmark starts."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_site(var: Path, port: int, database_url: str | None = None) -> subprocess.Popen:
    """`python -m rlweb.devserver` on SQLite in `var` (or on `database_url`), answering on `port`."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("REDIS_URL", "DATABASE_URL") and not key.startswith("RLWEB_")}
    if database_url:
        env["DATABASE_URL"] = database_url
    log = (var / "devserver.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "rlweb.devserver", "--host", "127.0.0.1", "--port", str(port),
                               "--var-dir", str(var)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    import urllib.request

    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=5):
                return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"rlweb did not start:\n{(var / 'devserver.log').read_text()[-3000:]}")
            time.sleep(0.5)


def use_site_database(var: Path, database_url: str | None = None) -> None:
    """Point this process's Django at the devserver's database, media and Redis."""
    os.environ["RLWEB_VAR_DIR"] = str(var)
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    os.environ["REDIS_URL"] = f"unix://{var / 'redis.sock'}?db=0"
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # the ORM runs beside playwright's event loop, in one thread
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlweb.settings")
    import django

    django.setup()


def make_run(user, name: str, total_steps: int, status: str = "running"):
    from django.utils import timezone

    from rlweb.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(owner=user, name=name, algorithm="dqn", env_id="CartPole-v1",
                                           hyperparameters={"learning_rate": 0.001}, total_steps=total_steps,
                                           eval_interval=1000, device="cpu")
    return Run.objects.create(experiment=experiment, seed=0, total_steps=total_steps, status=status,
                              task_id=f"bench-{name}", first_started_at=timezone.now(), started_at=timezone.now(),
                              attempts=1, heartbeat_at=timezone.now())


def fill(run, events: int, batch: int = 20_000) -> float:
    """`events` episode, train and eval events each, written through RedisSink.flush (the summary too)."""
    from rlweb.experiments.live import RedisSink
    from rlweb.experiments.models import Event

    sink = RedisSink(run, batch_size=10**9, flush_seconds=10**9)
    noise = random.Random(0)
    started = time.perf_counter()
    seq = 0
    for first in range(0, events, batch):
        pending = []
        for index in range(first, min(events, first + batch)):
            step = 10 * index
            trend = 500 * (1 - math.exp(-index / (events / 4)))
            for kind, values in (
                    ("episode", {"rollout/episode_return": trend + noise.gauss(0, 40),
                                 "rollout/episode_length": int(trend) + noise.randint(0, 20)}),
                    ("train", {"train/loss": math.exp(-index / events) + noise.random() * 0.1,
                               "train/epsilon": max(0.05, 1 - index / (events / 5)),
                               "train/learning_rate": 1e-3 * (1 - index / events)}),
                    ("eval", {"eval/return_mean": trend, "eval/return_std": 20 + noise.random() * 10})):
                seq += 1
                pending.append(Event(run_id=run.pk, seq=seq, kind=kind, step=step, time=index / 100, values=values))
        sink.pending = pending
        sink.steps_done = 10 * min(events, first + batch)
        sink.flush()
        done = min(events, first + batch)
        print(f"  {done:,} / {events:,} events per kind stored ({time.perf_counter() - started:.0f} s)",
              end="\r", flush=True)
    print()
    return time.perf_counter() - started


def log_in(browser, base: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{base}/login/")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    return context, page


def open_times(page, url: str, opens: int) -> list[float]:
    times = []
    for _ in range(opens):
        page.goto(url)
        page.wait_for_function("document.getElementById('run-page').dataset.ready === '1'", timeout=60_000)
        times.append(page.evaluate("performance.getEntriesByName('run-page-drawn')[0].startTime"))
    return times


def live_latencies(page, run, url: str, seconds: float, rate: float) -> list[float]:
    from rlweb.experiments.live import RedisSink

    page.goto(url)
    page.wait_for_function("document.getElementById('run-page').dataset.ready === '1'", timeout=60_000)
    page.wait_for_selector("#live-indicator:not([hidden])")
    page.evaluate("""() => { window.drawnAt = {}; window.receivedAt = {}; window.drawing = [];
        window.addEventListener('run-page:drawn', (event) => {
            const {seqs, received, drawStart, drawn} = event.detail;
            window.drawing.push(drawn - drawStart);
            seqs.forEach((seq, index) => {
                window.drawnAt[seq] = performance.timeOrigin + drawn;
                window.receivedAt[seq] = performance.timeOrigin + received[index]; }); }); }""")
    sink = RedisSink(run)
    emitted = {}
    noise = random.Random(1)
    count = int(seconds * rate)
    started = time.perf_counter()
    for index in range(count):
        time.sleep(max(0.0, started + index / rate - time.perf_counter()))
        kind, values = (("train", {"train/loss": noise.random(), "train/epsilon": 0.1}) if index % 5 == 4 else
                        ("episode", {"rollout/episode_return": noise.gauss(100, 10), "rollout/episode_length": 100}))
        at = time.time() * 1000
        sink.emit({"kind": kind, "step": 10 * index, "time": time.perf_counter() - started, "values": values})
        emitted[sink.seq] = at
    sink.flush()
    page.wait_for_function(f"Object.keys(window.drawnAt).length >= {count}", timeout=30_000)
    drawn, received, drawing = page.evaluate("[window.drawnAt, window.receivedAt, window.drawing]")
    arrival = [received[str(seq)] - at for seq, at in emitted.items()]
    print(f"  of which until the page has the event: p50 {percentile(arrival, 0.5):.0f} ms, "
          f"p95 {percentile(arrival, 0.95):.0f} ms; {len(drawing)} draws, "
          f"p50 {percentile(drawing, 0.5):.0f} ms, p95 {percentile(drawing, 0.95):.0f} ms each")
    return [drawn[str(seq)] - at for seq, at in emitted.items()]


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help="the site's database (default: SQLite in its folder); "
                        "an empty PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/rlweb_bench")
    parser.add_argument("--load-workers", type=int, default=0,
                        help="measure while this many workers report events into the site (benchmarks/sink_load.py)")
    parser.add_argument("--load-rate", type=float, default=100.0, help="events/s per load worker")


def start_load(args, var: Path, seconds: float):
    """The background load `--load-workers` asks for, reporting for `seconds` into the site's database and Redis."""
    if not args.load_workers:
        return None
    from benchmarks.sink_load import LoadWorkers

    database_url = args.database_url or f"sqlite:///{var / 'db.sqlite3'}"
    load = LoadWorkers(args.load_workers, args.load_rate, seconds, database_url, os.environ["REDIS_URL"])
    load.start()
    print(f"under load: {args.load_workers} workers report {args.load_rate:.0f} events/s each for {seconds:.0f} s")
    return load


def finish_load(load) -> None:
    if load is not None:
        print(f"the load: {load.summary(load.finish())}")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks dashboard")
    parser.add_argument("--events", type=int, default=1_000_000, help="events per metric of the long run")
    parser.add_argument("--opens", type=int, default=5)
    parser.add_argument("--live-seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=100.0, help="live events per second")
    parser.add_argument("--screenshot", type=Path, help="save the long run's page here")
    parser.add_argument("--var-dir", type=Path, help="keep the site's state here and reuse a long run filled before")
    add_load_arguments(parser)
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="rlweb-bench-") as folder:
        var = args.var_dir or Path(folder)
        var.mkdir(parents=True, exist_ok=True)
        server = start_site(var, port, args.database_url)
        load = None
        try:
            use_site_database(var, args.database_url)
            from django.contrib.auth import get_user_model

            from rlweb.experiments.models import Run

            user = get_user_model().objects.get_or_create(username=USERNAME)[0]
            user.set_password(PASSWORD)
            user.save()
            long_run = Run.objects.filter(experiment__owner=user, experiment__name=f"long {args.events}").first()
            if long_run is None:
                long_run = make_run(user, f"long {args.events}", total_steps=10 * args.events, status="succeeded")
                print(f"filling a run with {args.events:,} episode, train and eval events (2 + 3 + 2 metric keys)")
                seconds = fill(long_run, args.events)
                print(f"stored in {seconds:.0f} s ({3 * args.events / seconds:,.0f} events/s with the summary)")
            live_run = make_run(user, "live", total_steps=10**9)
            load = start_load(args, var, seconds=30 + 5 * args.opens + args.live_seconds)

            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                context, page = log_in(browser, base)
                times = open_times(page, f"{base}/runs/{long_run.pk}/", args.opens)
                points = page.evaluate("""Object.fromEntries([...document.querySelectorAll('.chart')].map(
                    (chart) => [chart.parentElement.dataset.metric, chart.data[0].x.length]))""")
                print(f"open and draw, {args.events:,} events per metric: first (cold cache) {times[0]:.0f} ms, "
                      f"then median {statistics.median(times[1:] or times):.0f} ms, max {max(times[1:] or times):.0f} ms"
                      f" over {len(times) - 1} more opens; points drawn per chart: {points}")
                if args.screenshot:
                    page.screenshot(path=str(args.screenshot), full_page=True)
                latencies = live_latencies(page, live_run, f"{base}/runs/{live_run.pk}/", args.live_seconds,
                                           args.rate)
                print(f"live latency at {args.rate:.0f} events/s, {len(latencies)} events: "
                      f"p50 {percentile(latencies, 0.5):.0f} ms, p95 {percentile(latencies, 0.95):.0f} ms, "
                      f"max {max(latencies):.0f} ms")
                context.close()
                browser.close()
            finish_load(load)
        finally:
            if load is not None:
                load.stop()  # none left reporting after a failure
            import signal

            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
