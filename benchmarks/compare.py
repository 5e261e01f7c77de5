"""The compare page with many long runs, in the real browser against the real stack.

    python -m benchmarks compare                         # 20 runs of 1,000,000 events each, opened 5 times
    python -m benchmarks compare --runs=5 --events=100000 --opens=3
    python -m benchmarks compare --load-workers=10 --database-url=postgres://...   # under load, as dashboard's

It starts `python -m rlweb.devserver` (its own Redis, SQLite in a temporary folder, worker, uvicorn) and
works on that database from this process (benchmarks/dashboard.py's helpers). One run gets `--events`
events (a third each episode, train and eval), stored the way a worker stores them (RedisSink.flush,
which keeps the downsampled summary the charts draw); the other runs are copies of its rows made in SQL,
each in its own experiment with another learning rate, since filling every run through the sink would
take an hour on two cores. Then `/compare/?runs=...` is opened `--opens` times in chromium: milliseconds
from navigation start until every chart is drawn (the page's `compare-page-drawn` mark), in overlay mode
and grouped by learning rate with a bootstrap band.

`seed_demo` makes the small, varied set of runs the browser test and the screenshots use.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import time
from pathlib import Path

import trainer

from benchmarks.dashboard import (CHROMIUM, add_load_arguments, fill, finish_load, free_port, log_in, start_load,
                                  start_site, use_site_database)

USERNAME, PASSWORD = "bench", "a long benchmark password 3"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


# --- a small, varied comparison: three experiments, several seeds ------------------------------------------

DEMO = [  # name, algorithm, hyperparameters, seeds, how fast it learns, where it levels off
    ("DQN lr 1e-3", "dqn", {"learning_rate": 0.001, "batch_size": 64, "gamma": 0.99}, 3, 6_000, 480.0),
    ("DQN lr 3e-4", "dqn", {"learning_rate": 0.0003, "batch_size": 64, "gamma": 0.99}, 3, 14_000, 400.0),
    ("PPO baseline", "ppo", {"learning_rate": 0.0003, "n_steps": 128, "gamma": 0.99}, 2, 9_000, 500.0),
]
DEMO_STEPS = 30_000


def demo_events(seed: int, pace: float, level: float, total_steps: int) -> list[tuple[str, int, float, dict]]:
    """(kind, step, time, values) of a made-up CartPole-like run: episodes, training, evaluations."""
    noise = random.Random(seed)
    events, step, seconds = [], 0, 0.0
    speed = 900 + 150 * noise.random()  # env steps per second
    next_eval = 2_000
    while step < total_steps:
        trend = level * (1 - math.exp(-step / pace))
        length = max(10, min(500, int(trend + noise.gauss(20, 25))))
        step += length
        seconds = step / speed
        events.append(("episode", step, seconds, {"rollout/episode_return": float(length),
                                                  "rollout/episode_length": length}))
        events.append(("train", step, seconds, {"train/loss": 0.4 * math.exp(-step / 15_000) + 0.05 * noise.random()}))
        if step >= next_eval:
            events.append(("eval", step, seconds, {"eval/return_mean": max(9.0, trend + noise.gauss(0, 25)),
                                                   "eval/return_std": abs(noise.gauss(15, 5))}))
            next_eval += 2_000
    return events


def store(run, events) -> None:
    """Events and their downsampled summary, as the Redis sink persists them."""
    from rlweb.experiments.history import summarize
    from rlweb.experiments.models import Event

    rows = Event.objects.bulk_create(Event(run=run, seq=seq, kind=kind, step=step, time=round(seconds, 3), values=values)
                                     for seq, (kind, step, seconds, values) in enumerate(events, start=1))
    summarize(run.pk, rows)


def seed_demo(username: str, password: str) -> list[int]:
    """A user with the DEMO experiments, their runs finished; returns the run ids."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from rlweb.experiments.models import Experiment, Run

    user = get_user_model().objects.create_user(username, password=password)
    run_ids = []
    for name, algorithm, hyperparameters, seeds, pace, level in DEMO:
        defaults = {param.name: param.default for param in trainer.get_spec(algorithm).params()}
        experiment = Experiment.objects.create(owner=user, name=name, algorithm=algorithm, env_id="CartPole-v1",
                                               hyperparameters={**defaults, **hyperparameters}, total_steps=DEMO_STEPS,
                                               eval_interval=2_000, num_seeds=seeds, device="cpu")
        for seed in range(seeds):
            events = demo_events(len(run_ids), pace, level, DEMO_STEPS)
            evaluations = [values["eval/return_mean"] for kind, _, _, values in events if kind == "eval"]
            finished = timezone.now() - timedelta(minutes=5)
            started = finished - timedelta(seconds=events[-1][2])
            run = Run.objects.create(
                experiment=experiment, seed=seed, total_steps=DEMO_STEPS, status="succeeded", attempts=1,
                steps_done=events[-1][1], first_started_at=started, started_at=started, finished_at=finished,
                device_used="cpu", worker_host="demo", eval_return_mean=evaluations[-1],
                best_eval_return=max(evaluations))
            store(run, events)
            run_ids.append(run.pk)
    return run_ids


# --- the benchmark -----------------------------------------------------------------------------------------

def copy_run(source, learning_rate: float):
    """A new run in its own experiment with the source run's events and summary, copied in SQL. Grouped by
    learning rate, the runs form four groups."""
    from django.db import connection

    from rlweb.experiments.models import Experiment, Run

    experiment = source.experiment
    copy = Experiment.objects.create(owner=experiment.owner, name=f"copy, lr {learning_rate:g}", algorithm="dqn",
                                     env_id="CartPole-v1", hyperparameters={"learning_rate": learning_rate},
                                     total_steps=experiment.total_steps, eval_interval=1000, device="cpu")
    run = Run.objects.create(experiment=copy, seed=0, total_steps=source.total_steps, status="succeeded",
                             steps_done=source.steps_done, first_started_at=source.first_started_at,
                             started_at=source.started_at, attempts=source.attempts, device_used="cpu")
    with connection.cursor() as cursor:
        cursor.execute('INSERT INTO experiments_event (run_id, seq, kind, step, time, "values") '
                       'SELECT %s, seq, kind, step, time, "values" FROM experiments_event WHERE run_id = %s',
                       [run.pk, source.pk])
        cursor.execute('INSERT INTO experiments_metricbucket (run_id, key, "index", width, count, last_seq, points, '
                       'band) SELECT %s, key, "index", width, count, last_seq, points, band '
                       'FROM experiments_metricbucket WHERE run_id = %s', [run.pk, source.pk])
    return run


def open_times(page, url: str, opens: int) -> list[float]:
    times = []
    for _ in range(opens):
        page.goto(url)
        page.wait_for_function("document.getElementById('compare-page').dataset.ready === '1'", timeout=120_000)
        times.append(page.evaluate("performance.getEntriesByName('compare-page-drawn')[0].startTime"))
    return times


def data_seconds(base: str, cookies: list[dict], query: str) -> float:
    """Seconds the server takes to answer compare-data (the page's one request), timed from here."""
    import urllib.request

    session = "; ".join(f"{cookie['name']}={cookie['value']}" for cookie in cookies)
    request = urllib.request.Request(f"{base}/compare/data.json?{query}", headers={"Cookie": session})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        size = len(response.read())
    seconds = time.perf_counter() - started
    print(f"  compare-data: {seconds * 1000:.0f} ms, {size / 1e6:.1f} MB")
    return seconds


def report(label: str, times: list[float]) -> None:
    print(f"{label}: median {statistics.median(times):.0f} ms, min {min(times):.0f}, max {max(times):.0f} "
          f"({', '.join(f'{value:.0f}' for value in times)})")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks compare")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--events", type=int, default=1_000_000, help="events per run")
    parser.add_argument("--opens", type=int, default=5)
    parser.add_argument("--screenshot", type=Path, help="save the grouped page here")
    add_load_arguments(parser)
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="rlweb-bench-") as folder:
        var = Path(folder)
        server = start_site(var, port, args.database_url)
        load = None
        try:
            use_site_database(var, args.database_url)
            from benchmarks.dashboard import make_run
            from django.contrib.auth import get_user_model

            user = get_user_model().objects.create_user(USERNAME, password=PASSWORD)
            source = make_run(user, "source lr 0.001", total_steps=10 * args.events, status="succeeded")
            per_kind = math.ceil(args.events / 3)
            print(f"filling one run with {3 * per_kind:,} events through the sink")
            print(f"  stored in {fill(source, per_kind):.0f} s")
            source.refresh_from_db()
            started = time.perf_counter()
            runs = [source] + [copy_run(source, 0.001 * (1 + index % 4)) for index in range(1, args.runs)]
            print(f"copied it into {args.runs - 1} more runs in {time.perf_counter() - started:.0f} s")
            query = f"runs={','.join(str(run.pk) for run in runs)}"
            load = start_load(args, var, seconds=30 + 2 * args.opens * (2 + args.runs / 4))

            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
                context, page = log_in(browser, base)
                data_seconds(base, context.cookies(), query)
                overlay = open_times(page, f"{base}/compare/?{query}", args.opens)
                grouped_query = f"{query}&group=hp:learning_rate&band=ci95"
                data_seconds(base, context.cookies(), grouped_query)
                grouped = open_times(page, f"{base}/compare/?{grouped_query}", args.opens)
                if args.screenshot:
                    page.screenshot(path=str(args.screenshot), full_page=True)
                browser.close()
            finish_load(load)
            print(f"{args.runs} runs x {3 * per_kind:,} events, page open until every chart is drawn:")
            report("  overlay, one colour per run", overlay)
            report("  grouped by learning rate, bootstrap band", grouped)
        finally:
            if load is not None:
                load.stop()  # none left reporting after a failure
            server.terminate()
            server.wait(timeout=60)
