"""Changing the learning rate of a running run from its page, in a real browser against the real stack: a bad
value is refused next to its field, a good one reaches the worker, which reports it; the log gets a line and every
chart a mark at that step, also after a reload. Screenshot: docs/screenshots/run-live-change.png."""

from __future__ import annotations

import pytest

from tests.e2e.stack import SCREENSHOTS, launch_experiment, painted, sign_up

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

USERNAME, PASSWORD = "steerer", "a long browser password 7"
TRAINING = {
    "total_steps": "200000", "eval_interval": "2000", "eval_episodes": "2", "hp_learning_starts": "500",
    "hp_buffer_size": "10000", "hp_batch_size": "32", "hp_train_frequency": "4", "hp_target_update_interval": "250",
    "hp_learning_rate": "0.001", "hp_hidden_layers": "64,64",
}
RETURNS = "document.querySelector('[data-metric=\"rollout/episode_return\"] .chart')"


def marks(chart: str) -> str:
    """A JS expression: the x positions of a chart's change marks."""
    return f"((({chart} || {{}}).layout || {{}}).shapes || []).map((shape) => shape.x0)"


def wait_for_each_chart(page, condition: str, timeout: float = 60_000) -> None:
    """Wait until `condition` (a JS expression of `chart`) holds for every chart shown on the page, bringing each
    chart that it does not hold for yet on screen, where charts draw. Charts are looked up at each poll, not counted
    once: the page adds one when a metric first arrives (on a slow machine, in the middle of such a wait), and a
    fixed index then pointed at a chart never brought on screen (CI 2026-11-29, twice)."""
    page.wait_for_function(f"""() => {{
        for (const chart of document.querySelectorAll('.chart')) {{
            // not shown, so not drawn: hidden, or in a folded group (Chromium lays those out: stack.charts_fit)
            if (!chart.offsetParent || chart.closest('details:not([open])')) continue;
            if (!({condition})) {{ chart.scrollIntoView({{block: 'center'}}); return false; }}
        }}
        return true;
    }}""", timeout=timeout)


def test_the_learning_rate_of_a_running_run_changes_from_its_page(site, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, site, USERNAME, PASSWORD)
    launch_experiment(page, site, "Live change", TRAINING)
    page.wait_for_selector("#live-change-form", timeout=120_000)
    page.wait_for_function("document.getElementById('run-status').textContent === 'running'", timeout=180_000)
    page.wait_for_function(f"(({RETURNS} || {{}}).data || []).length > 0", timeout=180_000)
    assert page.input_value("#id_hp_learning_rate") == "0.001"

    # a bad value: refused next to its field, nothing sent
    page.fill("#id_hp_learning_rate", "-3")
    page.click("#live-change-form button[type=submit]")
    page.wait_for_selector("#id_hp_learning_rate_error li")
    assert page.text_content("#id_hp_learning_rate_error") == "must be greater than 0"

    page.fill("#id_hp_learning_rate", "0.0005")
    page.click("#live-change-form button[type=submit]")
    page.wait_for_function("document.getElementById('live-change-status').textContent.startsWith('sent')")
    assert page.is_hidden("#id_hp_learning_rate_error")
    line = page.wait_for_selector("#log-list li.log-hyperparameters", timeout=20_000)
    assert "changed learning_rate 0.001 → 0.0005" in line.text_content()
    step = int(line.query_selector(".log-where").text_content().split()[1])
    page.wait_for_function(f"{marks(RETURNS)}.includes({step})", timeout=20_000)
    assert page.locator(".chart").count() > 1
    wait_for_each_chart(page, f"{marks('chart')}.includes({step})")  # each has the mark once drawn on screen
    page.evaluate("window.scrollTo(0, 0)")

    # after a reload the marks and the log line come from the stored history
    page.reload()
    page.wait_for_selector("#log-list li.log-hyperparameters")
    page.wait_for_function(f"{marks(RETURNS)}.includes({step})")
    assert page.input_value("#id_hp_learning_rate") == "0.0005"
    page.wait_for_function(  # a few more points after the mark
        f"{RETURNS}.data.some((trace) => trace.name === 'raw' && Array.from(trace.x).filter((x) => x > {step}).length >= 3)",
        timeout=60_000)
    wait_for_each_chart(page, "chart._fullLayout !== undefined")  # each chart drawn (on screen) with the points so far
    page.evaluate("window.scrollTo(0, 0)")
    painted(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "run-live-change.png"), full_page=True)
    assert not errors

    page.click("#cancel-form button")  # leave no run training behind
    page.wait_for_function("document.getElementById('run-status').textContent === 'cancelled'", timeout=60_000)


def test_a_plugins_algorithm_is_launched_from_the_form_on_its_own_environment_and_its_chart_drawn_live(
        site, browser):
    """Issue 29: the example plugin (examples/plugin, installed beside rlweb) is offered by the form with its own
    live setting, its environment comes from its Gymnasium entry point, and its run trains on the worker with its
    return drawn live."""
    pytest.importorskip("rlweb_example_plugin", reason="the example plugin is installed by .ci/run")
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(site + "/login/")  # the account the test above made
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(site + "/")
    page.goto(site + "/experiments/new/")
    assert "soft-dqn" in page.eval_on_selector_all("#id_algorithm option", "(all) => all.map((o) => o.value)")
    page.select_option("#id_algorithm", "soft-dqn")
    page.wait_for_selector("#id_hp_temperature")  # the plugin's own field, rendered from its config
    page.fill("#id_name", "Soft DQN in the corridor")
    page.fill("#id_env_id", "rlweb-example/Corridor-v0")
    for field, value in {"total_steps": "20000", "eval_interval": "1000", "eval_episodes": "2",
                         "hp_learning_starts": "200", "hp_buffer_size": "5000", "hp_batch_size": "32",
                         "hp_hidden_layers": "32"}.items():
        page.fill(f"#id_{field}", value)
    page.select_option("#id_device", "cpu")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    page.click("#run-table a[data-run-id]")
    page.wait_for_function("document.getElementById('run-status').textContent === 'running'", timeout=180_000)
    page.wait_for_function(f"(({RETURNS} || {{}}).data || []).some((trace) => trace.x.length >= 2)",
                           timeout=180_000)  # points arrive while it trains
    assert page.text_content("#run-status") == "running"
    assert page.input_value("#id_hp_temperature")  # its live setting on the live-change form
    page.click("#cancel-form button")
    page.wait_for_function("document.getElementById('run-status').textContent === 'cancelled'", timeout=60_000)
    assert not errors
