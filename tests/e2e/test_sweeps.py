"""A sweep in a real browser, on the real stack (its own Redis, worker and database): created from the form,
followed live on its page until every trial has ended, then the winner opened as an experiment of its own.
Screenshots: docs/screenshots/sweep-form.png and docs/screenshots/sweep-page.png."""

from __future__ import annotations

import pytest

from tests.e2e.stack import SCREENSHOTS, sign_up
from tests.web.helpers import TINY_DQN

pytestmark = pytest.mark.e2e  # its own site: the first sweep of a fresh install (study.open_storage)


def test_a_sweep_created_from_the_form_runs_its_trials_and_the_best_opens_as_an_experiment(site_stack, browser):
    base = site_stack.url
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, base, "sweeper", "a long browser password 9")
    page.click("nav >> text=Sweeps")
    page.click("#new-sweep")
    assert page.input_value("#id_preset") == "zoo:CartPole-v1"  # the fixed values start from the preset
    page.fill("#id_name", "CartPole lr search")
    for field, value in {"total_steps": "600", "eval_interval": "200", "eval_episodes": "2", "trials": "3",
                         "parallel": "2", "hp_learning_rate": "1e-4:1e-2:log",
                         **{f"hp_{name}": str(value) for name, value in TINY_DQN.items()}}.items():
        page.fill(f"#id_{field}", value)
    page.select_option("#id_sampler", "random")
    page.select_option("#id_pruner", "none")
    page.select_option("#id_device", "cpu")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "sweep-form.png"), full_page=True)
    page.click("text=Start the sweep")
    page.wait_for_selector("#trial-table tbody tr")
    assert "learning_rate" in page.text_content("#trial-table thead")

    page.wait_for_function("document.getElementById('sweep-status').textContent === 'finished'", timeout=240_000)
    page.wait_for_function("document.querySelectorAll('#chart-curves .scatterlayer .trace').length === 3")
    assert page.locator("#trial-table tbody tr[data-state=complete]").count() == 3
    assert "3 of 3 trials ended: 3 complete" in page.inner_text("#sweep-progress")
    for chart in ("history", "parallel", "slices"):
        assert page.locator(f"#chart-{chart} .main-svg").count() > 0, chart
    page.screenshot(path=str(SCREENSHOTS / "sweep-page.png"), full_page=True)
    best_text = page.inner_text("#best-text")

    page.fill("#id_seeds", "2")
    page.click("text=Launch the best as an experiment")
    page.wait_for_selector("#run-table")
    assert page.locator("#run-table a[data-run-id]").count() == 2
    stored = site_stack.orm("""
        from rlweb.experiments.models import Experiment
        from rlweb.sweeps.study import best_trial
        from rlweb.sweeps.models import Sweep
        best = best_trial(Sweep.objects.get(owner__username="sweeper"))
        launched = Experiment.objects.get(owner__username="sweeper", sweep_trial__isnull=True)
        result = [best.number, best.params["learning_rate"], launched.hyperparameters["learning_rate"], launched.num_seeds]
    """)
    assert best_text.startswith(f"trial {stored[0]},") and stored[1] == stored[2] and stored[3] == 2
    assert not errors, errors
