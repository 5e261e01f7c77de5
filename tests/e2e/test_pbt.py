"""Population-based training in a real browser, on the real stack (its own Redis, worker, beat and database): a
population of 4 started from the sweep form, followed live on its page (members, copies, lineage, settings over
time) until it has finished, then the best member's schedule launched as an experiment of its own.
Screenshot: docs/screenshots/pbt-page.png."""

from __future__ import annotations

import pytest

from tests.e2e.stack import SCREENSHOTS, sign_up
from tests.web.helpers import TINY_DQN

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack


def test_a_population_started_from_the_form_copies_live_and_its_best_schedule_launches(site_stack, browser):
    base = site_stack.url
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, base, "hedy", "a long browser password 9")
    page.click("nav >> text=Sweeps")
    page.click("#new-sweep")
    page.fill("#id_name", "CartPole population")
    page.select_option("#id_method", "pbt")
    for field, value in {"total_steps": "400", "eval_interval": "200", "eval_episodes": "1", "trials": "4",
                         "ready_interval": "200", "hp_learning_rate": "1e-4:1e-2:log",
                         "hp_exploration_final_eps": "0.01:0.2",
                         **{f"hp_{name}": str(value) for name, value in TINY_DQN.items()}}.items():
        page.fill(f"#id_{field}", value)
    page.select_option("#id_device", "cpu")
    page.click("text=Start the sweep")
    page.wait_for_selector("#copy-table")
    page.wait_for_function("document.querySelectorAll('#trial-table tbody tr').length === 4")  # drawn from its data
    assert "Population-based training" in page.inner_text(".meta")

    # one copy at the ready point (a quarter of 4), shown live in the table and as an arrow of the lineage
    page.wait_for_selector("#copy-table tbody tr", timeout=240_000)
    row = page.locator("#copy-table tbody tr").first
    assert row.get_attribute("data-step") == "200" and row.get_attribute("data-member") != row.get_attribute("data-donor")
    page.wait_for_function("document.getElementById('sweep-status').textContent === 'finished'", timeout=240_000)
    page.wait_for_function("document.querySelectorAll('#chart-curves .scatterlayer .trace').length === 4 && "
                           "!document.getElementById('chart-curves').textContent.includes('running')")
    page.wait_for_function("document.querySelectorAll('#chart-lineage .annotation').length === 1")
    assert page.locator("#chart-schedules .main-svg").count() > 0
    assert page.locator("#trial-table tbody tr[data-state=complete]").count() == 4
    assert "1 copy" in page.inner_text("#sweep-progress")
    assert page.inner_text("#best-schedule").startswith("from step 0: learning_rate=")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "pbt-page.png"), full_page=True)

    page.fill("#id_seeds", "2")
    page.click("text=Launch its schedule as an experiment")
    page.wait_for_selector("#run-table")
    assert page.locator("#run-table a[data-run-id]").count() == 2
    stored = site_stack.orm("""
        from rlweb.experiments.models import Experiment
        from rlweb.sweeps import pbt
        from rlweb.sweeps.models import Sweep
        from rlweb.sweeps.study import best_trial
        sweep = Sweep.objects.get(owner__username="hedy")
        schedule = pbt.whole_schedule(sweep, best_trial(sweep).number)
        launched = Experiment.objects.get(owner__username="hedy", sweep_trial__isnull=True)
        run = launched.runs.first()
        result = [schedule[0][1]["learning_rate"], launched.hyperparameters["learning_rate"],
                  [[step, values] for step, values in schedule[1:]],
                  [[entry["step"], entry["values"]] for entry in run.live_changes if entry.get("scheduled")]]
    """)
    assert stored[0] == stored[1] and stored[2] == stored[3]
    assert not errors, errors
