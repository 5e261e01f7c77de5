"""A run logged from a script, watched in Chromium on the real site (`make run`'s devserver): a CleanRL-style script
in a subprocess logs 300 points through rlweb_client (client/ on PYTHONPATH, nothing installed) over about 12 s,
with an API token made by `manage.py apitoken`. The run page draws the curve as the points arrive: its point count
grows while the script runs; the web server is killed (SIGKILL) mid-run and the devserver starts it again, while
the client keeps the points and the page reconnects; at the end the chart holds every step logged, once, in order.
Screenshot: docs/screenshots/logged-run.png."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.stack import REPO, SCREENSHOTS, sign_up

pytestmark = pytest.mark.e2e

USERNAME, PASSWORD = "scripter", "a long browser password 16"
POINTS = 300
RETURNS = "document.querySelector('[data-metric=\"charts/episodic_return\"] .chart')"
SCRIPT = '''
import argparse, math, random, sys, time
import rlweb_client

parser = argparse.ArgumentParser()
parser.add_argument("--env-id", default="CartPole-v1")
parser.add_argument("--total-timesteps", type=int, default=30_000)
parser.add_argument("--points", type=int, default=300)
parser.add_argument("--seconds", type=float, default=12.0)
args = parser.parse_args()

run = rlweb_client.init(experiment="cleanrl-live", config=vars(args), offline_dir="offline",
                        retry_delay=0.2, max_retry_delay=1.0)
print(run.url, flush=True)
sys.stdin.readline()  # the page is open
noise = random.Random(1)
started = time.monotonic()
for index in range(args.points):
    time.sleep(max(0.0, started + index * args.seconds / args.points - time.monotonic()))
    global_step = 100 * (index + 1)
    run.log({"charts/episodic_return": 500 * (1 - math.exp(-index / 80)) + noise.gauss(0, 20),
             "losses/value_loss": math.exp(-index / 100) + noise.random() / 10}, step=global_step)
run.finish()
print("finished", flush=True)
'''


def chart_count(page) -> int:
    """How many points the returns chart has (drawn or waiting on its live tail); 0 before it exists."""
    return page.evaluate(f"() => {{ const chart = {RETURNS}; return chart && chart.chart ? chart.chart.count : 0; }}")


def web_server_pid(var: Path) -> int:
    """The uvicorn process the devserver started for `var` (its children carry RLWEB_VAR_DIR)."""
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes()
            environment = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"uvicorn" in command and f"RLWEB_VAR_DIR={var}\0".encode() in environment:
            return int(proc.name)
    raise AssertionError("no uvicorn of this site")


def test_a_scripts_curve_is_drawn_live_while_it_logs_through_the_client_and_through_a_web_server_restart(
        site_stack, site, browser, tmp_path):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(30_000)
    began = time.monotonic()

    def mark(what: str) -> None:  # where the time goes, in the output of a failure
        print(f"{time.monotonic() - began:5.1f} s {what}")

    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, site, USERNAME, PASSWORD)
    django_env = dict(site_stack.env, RLWEB_VAR_DIR=str(site_stack.var), DJANGO_SETTINGS_MODULE="rlweb.settings")
    made = subprocess.run([sys.executable, "manage.py", "apitoken", USERNAME, "browser test"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=django_env)
    assert made.returncode == 0, made.stderr
    mark("token")
    (tmp_path / "train.py").write_text(SCRIPT)
    script = subprocess.Popen([sys.executable, "train.py", "--points", str(POINTS)], cwd=tmp_path, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO / "client"), "RLWEB_URL": site,
                                   "RLWEB_TOKEN": made.stdout.strip()})
    try:
        run_url = script.stdout.readline().strip()
        assert run_url.startswith(f"{site}/runs/"), script.stderr.read()
        page.goto(run_url)
        page.wait_for_function("document.getElementById('run-page').dataset.ready === '1'")
        page.wait_for_selector("#live-indicator:not([hidden])")
        mark("page open")
        script.stdin.write("go\n")
        script.stdin.flush()

        # the count grows while the script runs: seen at three sizes or more before it is done
        counts = [0]
        while len(set(counts)) < 4:
            assert script.poll() is None, f"the script ended before its curve grew on the page: {counts}"
            page.wait_for_timeout(200)
            counts.append(chart_count(page))
        assert counts == sorted(counts) and 0 < counts[-1] < POINTS, counts

        # the web server dies mid-run; the devserver starts it again after 1 s
        mark(f"counts {counts}")
        os.kill(web_server_pid(site_stack.var), signal.SIGKILL)
        out, problems = script.communicate(timeout=90)
        mark("script done")
        assert script.returncode == 0 and out.strip() == "finished", problems
        assert "retrying" in problems and "offline" not in problems, problems
    finally:
        if script.poll() is None:
            script.kill()
            script.communicate()

    # every point logged, drawn once and in order, after the outage as before it
    page.wait_for_function(f"{RETURNS}.chart.count === {POINTS}", timeout=40_000)
    page.wait_for_function(f"!{RETURNS}.querySelector('.live-tail polyline')", timeout=10_000)
    mark("all drawn")
    steps = page.evaluate(f"Array.from({RETURNS}.data.find((trace) => trace.name === 'raw').x)")
    assert steps == [100 * (index + 1) for index in range(POINTS)]
    assert page.locator("[data-metric='losses/value_loss'] .chart-note").text_content() == f"{POINTS} points"
    page.wait_for_function("document.getElementById('run-status').textContent.trim() === 'succeeded'",
                           timeout=20_000)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "logged-run.png"), full_page=False)
    assert not errors, errors
