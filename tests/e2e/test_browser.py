"""The whole path in a real browser: sign up, create and launch a DQN CartPole experiment, watch the chart
grow live (also after a reload), wait for success, download the final checkpoint and load it.

The real stack runs as subprocesses (`python -m rlweb.devserver`: its own Redis, migrations on a
temporary SQLite file, one Celery worker, uvicorn), driven by Debian's chromium through Playwright.
Screenshots of the run page land in docs/screenshots/.
"""

from __future__ import annotations

import zipfile

import pytest

from tests.e2e.stack import SCREENSHOTS, charts_fit

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

USERNAME, PASSWORD = "ada", "a long browser password 7"
TOTAL_STEPS = 12_000
TRAINING = {  # small enough to finish in a minute or two on a busy CPU, long enough to watch it grow
    "total_steps": str(TOTAL_STEPS), "eval_interval": "3000", "eval_episodes": "3", "checkpoint_interval": "6000",
    "hp_learning_starts": "500", "hp_buffer_size": "10000", "hp_batch_size": "32", "hp_train_frequency": "4",
    "hp_gradient_steps": "1", "hp_target_update_interval": "250", "hp_exploration_fraction": "0.3",
    "hp_learning_rate": "0.001", "hp_hidden_layers": "64,64",
}


CHART = "document.querySelector('[data-metric=\"rollout/episode_return\"] .chart')"
EVAL_CHART = "document.querySelector('[data-metric=\"eval/return_mean\"] .chart')"
STATUS = "document.getElementById('run-status')"


def raw_points(chart: str) -> str:
    """A JS expression: the number of points in a chart's raw trace (0 before the chart exists)."""
    return f"((({chart} || {{}}).data || []).find((trace) => trace.name === 'raw') || {{x: []}}).x.length"


def episode_points(page) -> int:
    return page.evaluate(raw_points(CHART))


def wait_for_more_points(page, than: int, timeout_ms: int = 120_000) -> int:
    page.wait_for_function(f"{raw_points(CHART)} > {than}", timeout=timeout_ms)
    return episode_points(page)


def test_a_user_trains_dqn_from_the_browser_and_downloads_the_checkpoint(site, browser, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 800}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    browser_errors = []
    page.on("pageerror", lambda error: browser_errors.append(str(error)))
    external = []
    page.on("request", lambda request: external.append(request.url)
            if request.url.startswith(("http:", "https:")) and not request.url.startswith(site) else None)

    # a fresh install: the login page points the first visitor to sign-up
    page.goto(site + "/")
    assert "/login/" in page.url
    page.click("text=Create an account")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password1", PASSWORD)
    page.fill("#id_password2", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(site + "/")

    # a bad value is refused next to its field
    page.click("text=New experiment")
    page.fill("#id_name", "CartPole from the browser")
    page.fill("#id_hp_learning_rate", "0")
    page.click("text=Create and launch")
    assert "must be greater than 0" in page.inner_text("#id_hp_learning_rate_error")

    # fix it and launch
    for name, value in TRAINING.items():
        page.fill(f"#id_{name}", value)
    page.select_option("#id_device", "cpu")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    page.click("#run-table a[data-run-id]")
    page.wait_for_selector("#run-progress")

    # the chart grows live, without a reload
    first = wait_for_more_points(page, 0)
    second = wait_for_more_points(page, first)
    assert second > first
    assert page.inner_text("#run-status") in ("running", "succeeded")
    progress_text = page.inner_text("#run-progress-text")
    assert progress_text.endswith(f" / {TOTAL_STEPS} steps") and int(progress_text.split(" / ")[0]) > 0
    page.screenshot(path=str(tmp_path / "mid-run.png"))

    # a reload mid-run draws the history (nothing lost), then goes on live
    before_reload = episode_points(page)
    page.reload()
    page.wait_for_function(f"{raw_points(CHART)} >= {max(before_reload, 1)}")
    after_reload = episode_points(page)
    page.wait_for_function(f"{raw_points(CHART)} > {after_reload} || {STATUS}.textContent === 'succeeded'",
                           timeout=120_000)

    # the run succeeds and the final checkpoint appears, without a reload
    page.wait_for_function(f"{STATUS}.textContent === 'succeeded'", timeout=300_000)
    assert page.inner_text("#run-progress-text") == f"{TOTAL_STEPS} / {TOTAL_STEPS} steps"
    assert page.evaluate(raw_points(EVAL_CHART)) >= 1  # evaluation points
    final_link = page.wait_for_selector('a[data-checkpoint-tag="final"]')
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "run-page.png"), full_page=True)

    with page.expect_download() as download_info:
        final_link.click()
    path = tmp_path / "final.zip"
    download_info.value.save_as(path)
    assert set(zipfile.ZipFile(path).namelist()) == {"config.json", "model.safetensors"}
    import trainer

    agent = trainer.load(path)
    assert agent.env_id == "CartPole-v1" and agent.steps_done == TOTAL_STEPS
    assert agent.evaluate(episodes=2)["mean"] > 0

    # the same page on a phone
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    page.wait_for_function(f"{raw_points(CHART)} > 0")
    charts_fit(page)  # plotly draws to the narrow page
    page.screenshot(path=str(SCREENSHOTS / "run-page-narrow.png"), full_page=True)

    assert not browser_errors
    assert not external, f"the pages reached outside the site: {external[:3]}"
    context.close()
