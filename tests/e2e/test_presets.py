"""Presets in a real browser: typing an environment fills the hyperparameters in from its preset, in place,
keeping what the user changed; one click goes back to the plain defaults and back again; the experiment
launched records its preset. Screenshot: docs/screenshots/experiment-form-preset.png."""

from __future__ import annotations

import pytest

from tests.e2e.stack import SCREENSHOTS, sign_up

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack


def test_an_environment_fills_in_its_preset_and_the_users_values_stay(site_stack, browser):
    base = site_stack.url
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.set_default_timeout(60_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, base, "zoo-keeper", "a long browser password 8")
    page.goto(base + "/experiments/new/")
    assert page.input_value("#id_preset") == "zoo:CartPole-v1"

    page.fill("#id_hp_batch_size", "100")  # changed by the user: stays through every switch below
    page.fill("#id_env_id", "Acrobot-v1")
    page.press("#id_env_id", "Tab")  # the change event
    page.wait_for_function("document.getElementById('id_preset').value === 'zoo:Acrobot-v1'")
    assert page.input_value("#id_hp_learning_rate") == "0.00063"
    assert page.input_value("#id_hp_target_update_interval") == "250"
    assert page.input_value("#id_hp_batch_size") == "100"
    assert page.input_value("#id_total_steps") == "100000"
    assert "RL Zoo: tuned for Acrobot-v1" in page.inner_text("#preset-note")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "experiment-form-preset.png"), full_page=True)

    page.click("#preset-note [data-preset=none]")
    page.wait_for_function("document.getElementById('id_preset').value === 'none'")
    assert page.input_value("#id_hp_learning_rate") == "0.0023" and page.input_value("#id_hp_batch_size") == "100"
    assert "dqn's own defaults" in page.inner_text("#preset-note")
    page.click("#preset-note [data-preset=auto]")
    page.wait_for_function("document.getElementById('id_preset').value === 'zoo:Acrobot-v1'")
    assert page.input_value("#id_hp_learning_rate") == "0.00063"

    page.fill("#id_name", "Acrobot from the zoo")
    page.fill("#id_total_steps", "2000")
    page.fill("#id_eval_interval", "0")
    page.select_option("#id_device", "cpu")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    assert "preset zoo:Acrobot-v1" in page.inner_text(".meta")
    stored = site_stack.orm("""
        from rlweb.experiments.models import Experiment
        experiment = Experiment.objects.get(owner__username="zoo-keeper", name="Acrobot from the zoo")
        result = [experiment.preset, experiment.hyperparameters["learning_rate"], experiment.hyperparameters["batch_size"]]
    """)
    assert stored == ["zoo:Acrobot-v1", 0.00063, 100]

    # its one evaluation (eval_interval 0: at the end) is drawn in a padded x range, not in a band a step wide
    page.click("#run-table a[data-run-id]")
    page.wait_for_function("document.getElementById('run-status').textContent.trim() === 'succeeded'", timeout=240_000)
    evaluations = page.locator('[data-metric="eval/return_mean"]')
    evaluations.scroll_into_view_if_needed()
    chart = "document.querySelector('[data-metric=\"eval/return_mean\"] .chart')"
    page.wait_for_function(f"(({chart}.data || []).find((trace) => trace.name === 'raw') || {{x: []}}).x.length === 1")
    low, high = page.evaluate(f"Array.from({chart}._fullLayout.xaxis.range)")
    assert low < 2000 < high and high - low >= 1000, (low, high)
    # one point has no line through it: it is drawn plain and larger than the faint raw points behind a smoothed line
    marker = page.evaluate(f"(({chart}._fullData.find((trace) => trace.name === 'raw')).marker)")
    assert marker["size"] == 7 and marker["color"] == "#3b6ed6", marker
    assert evaluations.locator(".chart-note").text_content() == "1 point"
    # the run ended before its first steps-per-second report: the page shows its average over the run
    page.wait_for_function("/^[0-9]+$/.test(document.getElementById('steps-per-second').textContent)")
    page.reload()
    assert page.text_content("#steps-per-second").isdigit()
    assert not errors
