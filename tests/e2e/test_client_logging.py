"""A run logged from a script, watched in Chromium on the real site (`make run`'s devserver): a small CleanRL-style
PPO (tests/e2e/cleanrl_ppo.py) in a subprocess trains on CartPole for about 12 s and logs its returns and losses
through rlweb_client (client/ on PYTHONPATH, nothing installed), with an API token made by `manage.py apitoken`. The run page draws the curve as the points arrive: its point count
grows while the script runs; the web server is killed (SIGKILL) mid-run and the devserver starts it again, while
the client keeps the points and the page reconnects; at the end the chart holds every step logged, once, in order.
Screenshot: docs/screenshots/logged-run.png."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.stack import REPO, SCREENSHOTS, sign_up

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

USERNAME, PASSWORD = "scripter", "a long browser password 16"
RETURNS = "document.querySelector('[data-metric=\"charts/episodic_return\"] .chart')"
SCRIPT = Path(__file__).with_name("cleanrl_ppo.py")  # a small CleanRL-style PPO on CartPole, paced to ~12 s


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
    page.set_default_timeout(60_000)
    began = time.monotonic()

    def mark(what: str) -> None:  # where the time goes, in the output of a failure
        print(f"{time.monotonic() - began:5.1f} s {what}")

    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, site, USERNAME, PASSWORD)
    made = subprocess.run([sys.executable, "manage.py", "apitoken", USERNAME, "browser test"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=site_stack.django_env())
    assert made.returncode == 0, made.stderr
    mark("token")
    script = subprocess.Popen([sys.executable, str(SCRIPT), "--wait-for-page", "--seconds", "12"], cwd=tmp_path,
                              text=True,
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
        assert counts == sorted(counts) and counts[-1] > 0, counts

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
    logged = json.loads((tmp_path / "logged.json").read_text())
    assert len(logged["returns"]) > counts[-1] and logged["losses"] == 32
    page.wait_for_function(f"{RETURNS}.chart.count === {len(logged['returns'])}", timeout=40_000)
    page.wait_for_function(f"!{RETURNS}.querySelector('.live-tail polyline')", timeout=10_000)
    mark("all drawn")
    steps = page.evaluate(f"Array.from({RETURNS}.data.find((trace) => trace.name === 'raw').x)")
    assert steps == logged["returns"]
    assert page.locator("[data-metric='losses/value_loss'] .chart-note").text_content() == f"{logged['losses']} points"
    assert page.text_content("#episode-count") == str(len(logged["returns"]))  # counted live by charts/episodic_return
    assert page.text_content("#last-episode-return") == f"{logged['return_values'][-1]:.1f}"
    assert page.text_content("#best-episode-return") == f"{max(logged['return_values']):.1f}"
    page.wait_for_function("document.getElementById('run-status').textContent.trim() === 'succeeded'",
                           timeout=20_000)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "logged-run.png"), full_page=False)
    page.reload()  # the same numbers from the history: the latest exact, though the summary keeps extremes only
    page.wait_for_function("document.getElementById('run-page').dataset.ready === '1'")
    assert page.text_content("#last-episode-return") == f"{logged['return_values'][-1]:.1f}"
    assert page.text_content("#best-episode-return") == f"{max(logged['return_values']):.1f}"
    assert not errors, errors
