"""The run page with long and live runs, in the real browser against the real stack.

    python -m benchmarks dashboard                      # 1,000,000 events per metric, live at 100 events/s
    python -m benchmarks dashboard --events=100000 --live-seconds=10 --opens=3
    python -m benchmarks dashboard --var-dir=/tmp/rlweb-bench   # keeps the filled database for the next time
    python -m benchmarks dashboard --load-workers=10 --database-url=postgres://postgres@127.0.0.1:5432/rlweb_bench
        # on PostgreSQL (an empty database), while 10 workers report 100 events/s each (benchmarks/sink_load.py)
    python -m benchmarks dashboard --events=1000 --opens=1 --runs=20 --rate=5
        # 20 live runs followed at once, each in a tab of one browser, 5 events/s each
    python -m benchmarks dashboard --events=1000 --opens=1 --baseline=HEAD~1 --rounds=3
        # live latency of the run page's scripts at HEAD~1 and in the working tree, in turns

It starts `python -m rlweb.devserver` (its own Redis, SQLite in a temporary folder, worker, uvicorn) and
works on that database from this process:

- open time: a run whose episode, train and eval events each number `--events` (each metric key as
  many values), persisted the way a worker persists them (RedisSink.flush, which keeps the downsampled
  summary), then opened `--opens` times in chromium: milliseconds from navigation start until every
  chart is drawn (the page's `run-page-drawn` mark);
- live latency: a running run with the page open; this process emits events with RedisSink.emit at
  `--rate` events/s, and the page reports when each one's points are on screen (the `run-page:drawn`
  event, after the next animation frame). Latency is that moment minus the moment emit was called
  (both wall clock on this machine). With `--runs N`, N running runs, each in its own tab of one browser
  context (one user with N run pages open; headless tabs are all visible, so all of them draw), each at
  `--rate` events/s: a tab that does not open or follow its run in time counts as stalled. With `--hidden-tabs`
  every tab but the first acts as a background tab of a browser window (document.hidden, no animation frames:
  it draws and paints nothing; opened in a window of its own, see background_tab), as in a browser with N tabs in
  one window; each must still receive every event of its run.
- `--baseline REV`: the same live measurement with the run page's scripts (static/experiments/**.js) as
  they were at git revision REV, served to the browser in place of the working tree's, in turns with the
  working tree's (`--rounds` each), on the same site under the same load.
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
                                           eval_interval=1000, device="cpu", auto_resume=False)
    return Run.objects.create(experiment=experiment, seed=0, total_steps=total_steps, status=status,
                              task_id=f"bench-{name}", first_started_at=timezone.now(), started_at=timezone.now(),
                              attempts=1, heartbeat_at=timezone.now())


def fill(run, events: int, batch: int = 20_000, verbose: bool = True) -> float:
    """`events` episode, train and eval events each, written through RedisSink.flush (the summary too)."""
    from rlweb.experiments.models import Event
    from rlweb.experiments.sink import RedisSink

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
        if verbose:
            print(f"  {done:,} / {events:,} events per kind stored ({time.perf_counter() - started:.0f} s)",
                  end="\r", flush=True)
    if verbose:
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


RECORD_DRAWN = """() => { window.drawnAt = {}; window.receivedAt = {}; window.drawing = [];
    window.addEventListener('run-page:drawn', (event) => {
        const {seqs, received, drawStart, drawEnd, drawn} = event.detail;
        window.drawing.push((drawEnd || drawn) - drawStart);
        seqs.forEach((seq, index) => {
            window.drawnAt[seq] = performance.timeOrigin + drawn;
            window.receivedAt[seq] = performance.timeOrigin + received[index]; }); }); }"""


def beat(runs: list) -> None:
    """The live runs' heartbeat, as their worker's would be: else the lost-run reaper takes them after 30 s."""
    from django.utils import timezone

    from rlweb.experiments.models import Run

    Run.objects.filter(pk__in=[run.pk for run in runs]).update(heartbeat_at=timezone.now())


FOLLOWING = "document.getElementById('run-page')?.dataset.ready === '1' && " \
            "!document.getElementById('live-indicator').hidden"


EPISODES = "(parseInt(document.getElementById('episode-count').textContent) || 0)"  # the page's episode count
HIDDEN_TAB = """Object.defineProperty(document, "hidden", {get: () => true});
Object.defineProperty(document, "visibilityState", {get: () => "hidden"});
window.requestAnimationFrame = () => 0;  // a hidden tab gets no frames
// and paints nothing, as a browser paints no background tab; its scripts still run and keep every event
document.addEventListener("DOMContentLoaded", () => { document.documentElement.style.display = "none"; });"""


def background_tab(context, anchor):
    """A new page of `context` in a window of its own. Headless chromium composites every tab of a window together,
    and a tab's frames wait for the others': beside 19 tabs that change their text 5 times a second, a tab of the
    same window got 7.5 animation frames a second, and 60 with each of them in its own window (pages of data: URLs,
    none of rlweb's code). A browser composites only the tab in front."""
    context_id = context.new_cdp_session(anchor).send("Target.getTargetInfo")["targetInfo"]["browserContextId"]
    with context.expect_page() as opened:
        context.browser.new_browser_cdp_session().send(
            "Target.createTarget", {"url": "about:blank", "browserContextId": context_id, "newWindow": True})
    return opened.value


def open_live_pages(context, urls: list[str], runs: list, timeout: float = 60.0,
                    hidden_tabs: bool = False) -> tuple[list, list[str]]:
    """A tab per URL in `context`, all opened at once; the ones that drew their run and follow it live within
    `timeout` seconds, and the URLs of the others (stalled: no connection left, say), which stay open."""
    tabs = []
    for index, url in enumerate(urls):
        if hidden_tabs and index:
            page = background_tab(context, tabs[0])
            page.add_init_script(HIDDEN_TAB)
        else:
            page = context.new_page()
        try:
            page.goto(url, wait_until="commit", timeout=5000)
        except Exception:  # playwright's TimeoutError: the page itself waits for a connection
            pass
        tabs.append(page)
    deadline = time.monotonic() + timeout
    pages, stalled = [], []
    for url, page in zip(urls, tabs):
        beat(runs)
        try:
            page.wait_for_function(FOLLOWING, polling=100,  # not at animation frames: a hidden tab has none
                                   timeout=max(1.0, deadline - time.monotonic()) * 1000)
            page.evaluate(RECORD_DRAWN)
            pages.append(page)
        except Exception:  # playwright's TimeoutError
            stalled.append(url)
    if stalled:
        print(f"  {len(stalled)} of {len(urls)} tabs not following their run after {timeout:.0f} s: "
              f"{', '.join(url.split('/', 3)[-1] for url in stalled)}")
    return pages, stalled


def live_latencies(context, runs: list, urls: list[str], seconds: float, rate: float, first_step: int = 0,
                   hidden_tabs: bool = False) -> dict:
    """Open a tab per run, emit `rate` events/s to each run for `seconds` (steps from `first_step` on), and return
    the latencies (ms) of the events whose tabs follow and draw, with the arrival and draw times, the stalled tabs
    and the hidden tabs that missed events."""
    from rlweb.experiments.sink import RedisSink

    pages, stalled = open_live_pages(context, urls, runs, hidden_tabs=hidden_tabs)
    followed = [index for index, url in enumerate(urls) if url not in stalled]
    if len(urls) > 1:
        time.sleep(5)  # the last tabs opened finish drawing their history before the events come
        beat(runs)
    hidden_base = {which: page.evaluate(EPISODES) for page, which in zip(pages, followed)}
    sinks = [RedisSink(run) for run in runs]
    emitted = [{} for _ in runs]
    noise = random.Random(1)
    count = int(seconds * rate)
    total_rate = rate * len(runs)
    started = time.perf_counter()
    for index in range(count * len(runs)):
        if index % int(total_rate) == 0:
            beat(runs)
        time.sleep(max(0.0, started + index / total_rate - time.perf_counter()))
        which, number = index % len(runs), index // len(runs)
        kind, values = (("train", {"train/loss": noise.random(), "train/epsilon": 0.1}) if number % 5 == 4 else
                        ("episode", {"rollout/episode_return": noise.gauss(100, 10), "rollout/episode_length": 100}))
        at = time.time() * 1000
        sinks[which].emit({"kind": kind, "step": first_step + 10 * number, "time": time.perf_counter() - started,
                           "values": values})
        emitted[which][sinks[which].seq] = at
    emit_seconds = time.perf_counter() - started
    for sink in sinks:
        sink.flush()
    latencies, arrival, drawing, missing, first_tab = [], [], [], 0, []
    episodes = sum(1 for number in range(count) if number % 5 != 4)
    for page, which in zip(pages, followed):
        if hidden_tabs and which:  # draws nothing: it must have every event's data
            try:
                page.wait_for_function(f"{EPISODES} >= {hidden_base[which] + episodes}", polling=100, timeout=30_000)
            except Exception:
                pass
            missing += max(0, hidden_base[which] + episodes - page.evaluate(EPISODES))
            page.close()
            continue
        try:
            page.wait_for_function(f"Object.keys(window.drawnAt).length >= {count}", timeout=30_000)
        except Exception:
            pass
        drawn, received, draws = page.evaluate("[window.drawnAt, window.receivedAt, window.drawing]")
        for seq, at in emitted[which].items():
            if str(seq) in drawn:
                latencies.append(drawn[str(seq)] - at)
                arrival.append(received[str(seq)] - at)
                if which == 0:
                    first_tab.append(latencies[-1])
            else:
                missing += 1
        drawing += draws
        page.close()
    return {"latencies": latencies, "arrival": arrival, "drawing": drawing, "stalled": stalled, "missing": missing,
            "emitted": count * len(runs), "emit_rate": count * len(runs) / emit_seconds, "first_tab": first_tab,
            "to_draw": count * (1 if hidden_tabs else len(runs))}


def report_live(label: str, result: dict, rate: float, runs: int) -> None:
    latencies, arrival, drawing = result["latencies"], result["arrival"], result["drawing"]
    where = f"{runs} runs at {rate:g} events/s each, {len(result['stalled'])} of {runs} tabs stalled, " \
            f"{result['missing']} events missing" if runs > 1 else f"{rate:g} events/s"
    if not latencies:
        print(f"{label}live latency at {where}: no event drawn")
        return
    print(f"{label}live latency at {where}, {len(latencies)} of {result['to_draw']} events drawn "
          f"({result['emitted']} emitted at {result['emit_rate']:.0f}/s): p50 {percentile(latencies, 0.5):.0f} ms, "
          f"p95 {percentile(latencies, 0.95):.0f} ms, max {max(latencies):.0f} ms")
    print(f"  of which until the page has the event: p50 {percentile(arrival, 0.5):.0f} ms, "
          f"p95 {percentile(arrival, 0.95):.0f} ms; {len(drawing)} draws, "
          f"p50 {percentile(drawing, 0.5):.0f} ms, p95 {percentile(drawing, 0.95):.0f} ms each")
    if runs > 1 and result["first_tab"]:
        first = result["first_tab"]
        print(f"  the first tab opened alone: p50 {percentile(first, 0.5):.0f} ms, p95 {percentile(first, 0.95):.0f} ms")


def scripts_at(revision: str) -> dict[str, bytes]:
    """The run page's scripts (static/experiments/**.js, ES modules since issue 26: a revision before that needs the
    templates of its time) as they were at git `revision` (or as they are in the folder `revision`: a variant being
    tried, laid out as static/experiments), by the path the browser asks for."""
    if Path(revision).is_dir():
        return {f"**/static/experiments/{path.relative_to(revision).as_posix()}": path.read_bytes()
                for path in Path(revision).rglob("*.js")}
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", revision, "static/experiments/"], cwd=REPO,
                           capture_output=True, check=True, text=True).stdout.split()
    return {f"**/{name}": subprocess.run(["git", "show", f"{revision}:{name}"], cwd=REPO, capture_output=True,
                                         check=True).stdout
            for name in names if name.endswith(".js")}


def serve_scripts(context, scripts: dict[str, bytes]) -> None:
    def answer(body: bytes):
        return lambda route, request: route.fulfill(body=body, content_type="text/javascript")

    for pattern, body in scripts.items():
        context.route(pattern, answer(body))


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
    parser.add_argument("--rate", type=float, default=100.0, help="live events per second (per run)")
    parser.add_argument("--runs", type=int, default=1, help="live runs followed at once, a tab each")
    parser.add_argument("--hidden-tabs", action="store_true",
                        help="with --runs: every tab but the first acts as a hidden background tab")
    parser.add_argument("--history", type=int, default=0,
                        help="events per kind each live run has stored before its page opens (a run under way)")
    parser.add_argument("--baseline", metavar="REV",
                        help="also measure the run page's scripts at this git revision (or in this folder), in turns "
                             "with the working tree's")
    parser.add_argument("--rounds", type=int, default=1, help="live measurements of each variant, in turns")
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
            variants = [("", None)] + ([(f"at {args.baseline}: ", scripts_at(args.baseline))] if args.baseline else [])
            if args.baseline:
                variants.reverse()  # the baseline first in each round
            load = start_load(args, var, seconds=30 + 5 * args.opens
                              + (args.live_seconds + 20) * args.rounds * len(variants))

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
                context.close()
                pooled = {label: [] for label, _ in variants}
                for round_number in range(args.rounds):
                    for label, scripts in variants:
                        runs = [make_run(user, f"live {round_number} {label}{index}", total_steps=10**9)
                                for index in range(args.runs)]
                        for run in runs if args.history else []:
                            fill(run, args.history, verbose=False)
                        context, signed_in = log_in(browser, base)
                        signed_in.close()
                        if scripts:
                            serve_scripts(context, scripts)
                        print(f"round {round_number + 1}, {label or 'working tree: '}load {os.getloadavg()[0]:.2f}")
                        result = live_latencies(context, runs, [f"{base}/runs/{run.pk}/" for run in runs],
                                                args.live_seconds, args.rate, first_step=10 * args.history,
                                                hidden_tabs=args.hidden_tabs)
                        report_live(label, result, args.rate, args.runs)
                        pooled[label] += result["latencies"]
                        context.close()
                        Run.objects.filter(pk__in=[run.pk for run in runs]).update(status="succeeded")
                if args.rounds > 1:
                    for label, latencies in pooled.items():
                        if latencies:
                            print(f"{label or 'working tree: '}all rounds, {len(latencies)} events: "
                                  f"p50 {percentile(latencies, 0.5):.0f} ms, p95 {percentile(latencies, 0.95):.0f} ms")
                browser.close()
            finish_load(load)
        finally:
            if load is not None:
                load.stop()  # none left reporting after a failure
            import signal

            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
