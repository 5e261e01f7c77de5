"""A suite in a real browser, on the real stack (its own Redis, worker and database): 2 algorithms x 3 environments x
2 seeds on a tiny budget, launched from the form, followed live on its page while the worker trains its 12 runs (8 at
first, the site's limit of queued and running runs, the rest as runs end), until the page shows the aggregates
across tasks; then its scores CSV, and its HTML report opened with every network request refused.
Screenshots: docs/screenshots/suite-form.png, docs/screenshots/suite-page.png, docs/screenshots/suite-report.png."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.e2e.stack import SCREENSHOTS, charts_fit, sign_up

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

ENVS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"]
TINY = ("hidden_layers=32,32\ndqn.learning_starts=50\ndqn.buffer_size=1000\ndqn.batch_size=16\n"
        "dqn.train_frequency=16\ndqn.gradient_steps=4\nppo.num_envs=2\nppo.n_steps=64\nppo.batch_size=64\n"
        "ppo.n_epochs=2")
REPORT_URL = "http://report.invalid/suite-report.html"  # the downloaded file, served by the test's own route


def test_a_suite_trains_its_runs_and_its_page_and_offline_report_show_the_aggregates(site_stack, browser, tmp_path):
    base = site_stack.url
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, base, "suite-runner", "a long suite password 3")
    page.click("nav >> text=Suites")
    page.click("#new-suite")
    page.fill("#id_name", "Classic trio")
    for algorithm in ("dqn", "ppo"):
        page.check(f"#id_algorithms input[value='{algorithm}']")
    page.select_option("#id_env_list", "atari5")  # a named list fills in its ids, with its source
    # the form's script is a module, run once the page has loaded: it fills in a list chosen before then too
    page.wait_for_function("document.getElementById('id_env_ids').value.trim() !== ''")
    assert page.input_value("#id_env_ids").splitlines()[0] == "ALE/BattleZone-v5"
    assert "2210.02019" in page.inner_text("#env-list-source")
    page.select_option("#id_env_list", "")
    page.fill("#id_env_ids", "\n".join(ENVS))
    for field, value in {"num_seeds": "2", "total_steps": "256", "eval_interval": "0", "eval_episodes": "1",
                         "overrides": TINY}.items():
        page.fill(f"#id_{field}", value)
    page.select_option("#id_device", "cpu")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "suite-form.png"), full_page=True)
    page.click("text=Launch the suite")
    page.wait_for_selector("#run-table tbody tr")
    assert "2 experiments wait for room" in page.inner_text(".messages")
    assert page.locator("#run-table tbody tr").count() == 8  # the site's limit; the other 4 start as runs end

    page.wait_for_function("document.body.dataset.suiteSettled === 'true'", timeout=300_000)
    assert page.locator("#run-table tbody tr[data-status=succeeded]").count() == 12
    assert page.inner_text("#suite-status") == "finished"
    assert page.locator("#aggregate-table tbody tr").count() == 2
    for algorithm in ("dqn", "ppo"):
        cells = page.locator(f"#aggregate-table tr[data-algorithm={algorithm}] td[data-metric]")
        assert cells.count() == 4 and all("[" in text for text in cells.all_inner_texts())
    assert "Over 3 tasks (CartPole-v1, Acrobot-v1, MountainCar-v0), 2 runs each" in page.inner_text("#aggregate-note")
    page.wait_for_function("document.querySelectorAll('#aggregate-chart .scatterlayer .trace').length === 8")
    charts_fit(page)
    page.screenshot(path=str(SCREENSHOTS / "suite-page.png"), full_page=True)

    with page.expect_download() as download:
        page.click("#download-csv")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert sorted((row["algorithm"], row["env_id"], row["seed"]) for row in rows) == sorted(
        (algorithm, env_id, str(seed)) for algorithm in ("dqn", "ppo") for env_id in ENVS for seed in (0, 1))
    assert all(row["status"] == "succeeded" and row["score (final evaluation)"] and row["normalised_score"]
               for row in rows)

    with page.expect_download() as download:
        page.click("#download-report")
    report = Path(download.value.path()).read_bytes()
    assert not errors, errors

    offline = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    offline.set_default_timeout(60_000)
    asked, report_errors = [], []
    offline.on("pageerror", lambda error: report_errors.append(str(error)))

    def serve_only_the_report(route):
        if route.request.url == REPORT_URL:
            route.fulfill(body=report, content_type="text/html; charset=utf-8")
        else:  # anything else the report would fetch: refused, and recorded
            asked.append(route.request.url)
            route.abort()

    offline.route("**/*", serve_only_the_report)
    offline.goto(REPORT_URL)
    offline.wait_for_function("document.querySelectorAll('#aggregate-chart .scatterlayer .trace').length === 8")
    assert offline.locator("#aggregate-table tbody tr").count() == 2
    assert offline.locator("#run-table tbody tr").count() == 12
    assert offline.locator("#run-table a").count() == 0  # no links back to the site in a file meant to travel
    offline.screenshot(path=str(SCREENSHOTS / "suite-report.png"), full_page=True)
    assert asked == [] and report_errors == [], (asked, report_errors)
    offline.context.close()
    context.close()
