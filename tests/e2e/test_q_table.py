"""The Q-table heatmap of a tabular run in a real browser against the real stack (devserver: Redis,
worker, uvicorn): FrozenLake's table drawn in the shape of its map, refreshed from the newest checkpoint."""

from __future__ import annotations

import pytest

from tests.e2e.stack import SCREENSHOTS, sign_up

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

USERNAME, PASSWORD = "tabula", "a long browser password 11"
HEATMAP = "document.getElementById('q-table-chart')"


def test_a_tabular_run_shows_its_q_table_as_a_heatmap(site, browser):  # noqa: F811
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    sign_up(page, site, USERNAME, PASSWORD)
    page.goto(site + "/experiments/new/?algorithm=qlearning")
    page.fill("#id_name", "FrozenLake table")
    page.fill("#id_env_id", "FrozenLake-v1")
    for name, value in {"total_steps": "20000", "eval_interval": "5000", "eval_episodes": "20",
                        "hp_exploration_decay": "0.9995", "hp_learning_rate": "0.2"}.items():
        page.fill(f"#id_{name}", value)
    page.select_option("#id_device", "cpu")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    page.click("#run-table a[data-run-id]")
    page.wait_for_selector("#run-status")  # the run page, not the experiment page still navigating away
    page.wait_for_function("document.getElementById('run-status').textContent.trim() === 'succeeded'",
                           timeout=120_000)
    page.click("#q-table-refresh")  # the final checkpoint exists now
    page.wait_for_function(f"({HEATMAP}.data || []).length === 1 && {HEATMAP}.data[0].type === 'heatmap'")
    page.wait_for_function("document.getElementById('q-table-note').textContent.includes('final')")
    values = page.evaluate(f"{HEATMAP}.data[0].z")
    assert len(values) == 4 and all(len(row) == 4 for row in values)
    assert values[0][0] is not None and values[1][1] is None  # the start was updated, a hole never is
    page.locator("#q-table").screenshot(path=str(SCREENSHOTS / "q-table.png"))
