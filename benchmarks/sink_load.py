"""The sink under load: many workers reporting events at once into one Redis and one database.

    python -m benchmarks sink_load --database-url postgres://postgres@127.0.0.1:5432/rlweb_sink_load
    python -m benchmarks sink_load --workers 10 --events-per-second 100 --seconds 30 --database-url ... --profile

`--workers` processes each take a running run and report `--events-per-second` events for `--seconds` through
`RedisSink`, the class the Celery task hands the runner, into the Redis at `--redis-url` and the database at
`--database-url` (migrated first; use an empty one). No training: the events look like a DQN run's (train,
episode and timing events, an evaluation now and then), each stamped with its emit time. The runner's polls
(`should_stop` and `changes`, twice a second) are made as a runner makes them. A worker that falls behind
its rate emits at once to catch up, so the events it emitted in the window show what the sink sustains.

It prints the events emitted and stored per second, the lag from emit to stored (the database transaction
that holds the event committed) at p50/p95/max, the database size per million events (the event table and
the charts' summary, `pg_total_relation_size` over the rows), and Redis before, during and after: the
server's `used_memory`, and the entries and `MEMORY USAGE` of the runs' streams. `--profile` runs the first
worker under cProfile and prints where its time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

from benchmarks.dashboard import REPO

POLL_SECONDS = 0.5  # the runner polls should_stop and changes about twice a second


def setup_django(database_url: str, redis_url: str) -> None:
    os.environ.update(DATABASE_URL=database_url, REDIS_URL=redis_url, DJANGO_SETTINGS_MODULE="rlweb.settings")
    import django

    django.setup()


def event(index: int, noise: random.Random) -> dict:
    """The `index`th event of a DQN-like run: mostly train events, an episode every third, timing every tenth,
    an evaluation every thousandth."""
    step = 4 * index
    if index % 1000 == 999:
        kind, values = "eval", {"eval/return_mean": noise.uniform(0, 500), "eval/return_std": noise.uniform(0, 50)}
    elif index % 10 == 9:
        kind, values = "time", {"time/steps_per_second": noise.uniform(800, 1200)}
    elif index % 3 == 2:
        kind, values = "episode", {"rollout/episode_return": noise.uniform(0, 500),
                                   "rollout/episode_length": noise.randint(10, 500)}
    else:
        kind, values = "train", {"train/loss": noise.expovariate(1.0), "train/q_mean": noise.gauss(20, 5),
                                 "train/epsilon": max(0.05, 1 - step / 10**6), "train/learning_rate": 1e-4}
    values["bench/emitted_at"] = time.time()
    return {"kind": kind, "step": step, "time": index / 100, "values": values}


def report_events(run_id: int, rate: float, seconds: float, out: Path) -> None:
    """One worker: once every worker is ready, emit at `rate` from the wall time in the file `start` for `seconds`, then finish and close the sink.
    Writes the emitted count and every event's lag from emit to stored (seconds) to `out`."""
    from rlweb.experiments.models import Run
    from rlweb.experiments.sink import RedisSink

    sink = RedisSink(Run.objects.get(pk=run_id))
    noise = random.Random(run_id)
    waiting: deque[tuple[int, float]] = deque()  # (seq, emit time) not stored yet
    lags: list[float] = []

    def note_stored():
        stored, now = sink.seq - len(sink.pending), time.time()
        while waiting and waiting[0][0] <= stored:
            lags.append(now - waiting.popleft()[1])

    out.with_suffix(".ready").touch()  # Django, torch (trainer's import) and the sink are loaded
    start_file = out.with_name("start")
    while not start_file.exists():
        time.sleep(0.05)
    time.sleep(max(0.0, float(start_file.read_text()) - time.time()))
    sink.emit({"kind": "started", "step": 0, "time": 0.0, "values": {"device": "cpu"}})
    started = time.monotonic()
    next_poll = started + POLL_SECONDS
    index = 0
    while True:
        due = started + index / rate
        now = time.monotonic()
        if now >= started + seconds:
            break
        if due > now:
            time.sleep(due - now)
        record = event(index, noise)
        sink.emit(record)
        waiting.append((sink.seq, record["values"]["bench/emitted_at"]))
        note_stored()
        index += 1
        if time.monotonic() >= next_poll:
            sink.should_stop()
            sink.changes()
            note_stored()
            next_poll += POLL_SECONDS
    sink.emit({"kind": "finished", "step": 4 * index, "time": index / 100, "values": {"status": "succeeded"}})
    sink.close()
    note_stored()
    out.write_text(json.dumps({"run": run_id, "emitted": index, "seconds": time.monotonic() - started,
                               "lags": lags}))


def worker_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    for name in ("--run", "--rate", "--seconds", "--out", "--database-url", "--redis-url"):
        parser.add_argument(name, required=True)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    setup_django(args.database_url, args.redis_url)
    work = lambda: report_events(int(args.run), float(args.rate), float(args.seconds), Path(args.out))  # noqa: E731
    if not args.profile:
        return work()
    profile = cProfile.Profile()
    profile.runcall(work)
    print("\nwhere the first worker's time went (cumulative seconds, top 25):")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


def make_runs(count: int) -> list:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from rlweb.experiments.models import Experiment, Run

    user = get_user_model().objects.get_or_create(username="sink-load")[0]
    experiment = Experiment.objects.create(owner=user, name=f"sink load x{count}", algorithm="dqn",
                                           env_id="CartPole-v1", total_steps=10**9, eval_interval=1000, device="cpu")
    return [Run.objects.create(experiment=experiment, seed=seed, total_steps=10**9, status=Run.Status.RUNNING,
                               task_id=f"sink-load-{seed}", started_at=timezone.now(), heartbeat_at=timezone.now())
            for seed in range(count)]


def redis_figures(client, runs: list) -> dict:
    from rlweb.experiments.redis_keys import stream_key

    keys = [stream_key(run.pk) for run in runs]
    pipeline = client.pipeline(transaction=False)
    for key in keys:
        pipeline.xlen(key)
        pipeline.memory_usage(key)
    replies = pipeline.execute()
    return {"used_memory": client.info("memory")["used_memory"], "entries": sum(replies[0::2]),
            "stream_bytes": sum(value or 0 for value in replies[1::2])}


class RedisSampler(threading.Thread):
    def __init__(self, client, runs: list):
        super().__init__(daemon=True)
        self.client, self.runs, self.samples, self.stopped = client, runs, [], threading.Event()

    def run(self):
        while not self.stopped.wait(1.0):
            self.samples.append(redis_figures(self.client, self.runs))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class LoadWorkers:
    """`count` worker processes, one running run each, reporting `rate` events/s for `seconds` into the database
    at `database_url` and the Redis at `redis_url` (Django must be set up on that database in this process).
    `start()` returns once every worker emits; `finish()` waits for them and returns their results."""

    def __init__(self, count: int, rate: float, seconds: float, database_url: str, redis_url: str,
                 profile: bool = False):
        self.runs = make_runs(count)
        self.folder = tempfile.TemporaryDirectory(prefix="rlweb-sink-load-")
        self.outs = [Path(self.folder.name) / f"worker-{run.pk}.json" for run in self.runs]
        self.processes = [subprocess.Popen(
            [sys.executable, "-m", "benchmarks", "sink_load", "--worker", "--run", str(run.pk), "--rate", str(rate),
             "--seconds", str(seconds), "--out", str(out), "--database-url", database_url, "--redis-url", redis_url]
            + (["--profile"] if profile and number == 0 else []), cwd=REPO)
            for number, (run, out) in enumerate(zip(self.runs, self.outs))]
        self.rate = rate

    def start(self) -> None:
        while not all(out.with_suffix(".ready").exists() for out in self.outs):
            if any(process.poll() is not None for process in self.processes):
                raise SystemExit("a worker exited before it was ready")
            time.sleep(0.1)
        (Path(self.folder.name) / "start").write_text(str(time.time() + 1.0))
        time.sleep(1.0)

    def finish(self) -> list[dict]:
        codes = [process.wait() for process in self.processes]
        results = [json.loads(out.read_text()) for out in self.outs if out.exists()]
        self.folder.cleanup()
        if any(codes) or len(results) < len(self.runs):
            raise SystemExit(f"workers failed: exit codes {codes}")
        return results

    def stop(self) -> None:
        """Stop the workers at once (a benchmark that failed midway): none is left reporting."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.folder.cleanup()

    def summary(self, results: list[dict]) -> str:
        """One line: what the workers emitted, and their events' lag from emit to stored."""
        emitted = sum(result["emitted"] for result in results)
        window = max(result["seconds"] for result in results)
        lags = [lag for result in results for lag in result["lags"]]
        return (f"{len(results)} workers x {self.rate:.0f} events/s: emitted {emitted / window:.0f} events/s for "
                f"{window:.0f} s; lag from emit to stored p50 {statistics.median(lags) * 1000:.0f} ms, "
                f"p95 {percentile(lags, 0.95) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms")


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--worker":
        return worker_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks sink_load")
    parser.add_argument("--workers", type=int, default=10, help="processes reporting at once, one run each")
    parser.add_argument("--events-per-second", type=float, default=100.0, help="per worker")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/rlweb_sink_load",
                        help="a PostgreSQL database, migrated first: use an empty one")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--profile", action="store_true", help="profile the first worker")
    args = parser.parse_args(argv)

    setup_django(args.database_url, args.redis_url)
    from django.core.management import call_command
    from django.db import connection

    from rlweb.experiments.redis_keys import redis_client
    from rlweb.experiments.models import Event, MetricBucket

    call_command("migrate", verbosity=0)
    load = LoadWorkers(args.workers, args.events_per_second, args.seconds, args.database_url, args.redis_url,
                       profile=args.profile)
    runs = load.runs
    client = redis_client()
    before = redis_figures(client, runs)
    sampler = RedisSampler(client, runs)
    load.start()
    sampler.start()
    results = load.finish()
    sampler.stopped.set()
    sampler.join()
    after = redis_figures(client, runs)

    emitted = sum(result["emitted"] for result in results)
    window = max(result["seconds"] for result in results)
    stored = Event.objects.filter(run__in=runs).count()
    lags = [lag for result in results for lag in result["lags"]]
    with connection.cursor() as cursor:
        cursor.execute("select pg_total_relation_size(%s), pg_total_relation_size(%s)",
                       [Event._meta.db_table, MetricBucket._meta.db_table])
        event_bytes, bucket_bytes = cursor.fetchone()
    all_rows = Event.objects.count()
    peak = max(sampler.samples, key=lambda sample: sample["used_memory"]) if sampler.samples else after
    most = max((sample["entries"] for sample in sampler.samples), default=0)
    print(f"\n{args.workers} workers x {args.events_per_second:.0f} events/s for {args.seconds:.0f} s "
          f"(asked {args.workers * args.events_per_second:.0f} events/s); {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"emitted {emitted} events in {window:.1f} s: {emitted / window:.0f} events/s "
          f"(per worker {min(r['emitted'] for r in results) / window:.0f}-{max(r['emitted'] for r in results) / window:.0f})")
    print(f"stored {stored} rows ({stored - emitted - 2 * len(runs):+d} against emitted + started/finished): "
          f"{stored / window:.0f} events/s")
    print(f"lag from emit to stored: p50 {statistics.median(lags) * 1000:.0f} ms, p95 "
          f"{percentile(lags, 0.95) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms ({len(lags)} events)")
    print(f"database: events table {event_bytes / 2**20:.1f} MB for {all_rows} rows = "
          f"{event_bytes / all_rows * 1e6 / 2**30:.2f} GB per million events; the charts' summary "
          f"{bucket_bytes / 2**20:.1f} MB")
    print(f"Redis used_memory: before {before['used_memory'] / 2**20:.1f} MB, peak {peak['used_memory'] / 2**20:.1f} MB, "
          f"after {after['used_memory'] / 2**20:.1f} MB (the whole server)")
    print(f"run streams: at most {most} entries in all during the run; after the runs ended {after['entries']} entries, "
          f"{after['stream_bytes'] / 2**10:.0f} KB (each stream's tail, expiring {client.ttl(f'rlweb:run:{runs[0].pk}:events')} s later)")
