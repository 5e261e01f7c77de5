"""Jobs on a checkpoint from the run page, in a real browser against the real stack: once the run has
checkpoints, "Act on a checkpoint" evaluates one for N episodes or records a video of it on the run's worker;
the list shows the job waiting, then its return or a video that plays; a bad value is refused next to the form.
Screenshot: docs/screenshots/run-checkpoint-jobs.png."""

from __future__ import annotations

import re

import pytest

from tests.e2e.stack import SCREENSHOTS, launch_experiment, sign_up

pytestmark = pytest.mark.e2e

USERNAME, PASSWORD = "evaluator", "a long browser password 21"
TRAINING = {"total_steps": "2000", "eval_interval": "1000", "eval_episodes": "2", "checkpoint_interval": "1000",
            "video_interval": "0", "hp_learning_starts": "300", "hp_buffer_size": "5000", "hp_batch_size": "32",
            "hp_hidden_layers": "32,32"}


def job_rows(page) -> list[dict]:
    return page.eval_on_selector_all("#checkpoint-jobs li[data-job-id]", """(items) => items.map((item) => ({
        status: item.dataset.status, checkpoint: item.querySelector(".job-checkpoint").textContent.trim(),
        job: item.querySelector(".job-kind").textContent.trim(),
        result: item.querySelector(".job-result").textContent.trim()}))""")


def test_a_checkpoint_is_evaluated_and_filmed_from_the_run_page(site, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(30_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, site, USERNAME, PASSWORD)
    launch_experiment(page, site, "Act on checkpoints", TRAINING)
    page.wait_for_function("document.getElementById('run-status').textContent.trim() === 'succeeded'",
                           timeout=240_000)
    page.wait_for_selector("#checkpoint-job-form:not([hidden])")  # shown once checkpoints came, live
    offered = page.eval_on_selector_all("#id_checkpoint option", "(all) => all.map((o) => o.textContent)")
    assert offered[0].endswith("step 2000") and {"final, step 2000", "periodic, step 1000"} <= set(offered)
    page.select_option("#id_checkpoint", label="final, step 2000")

    # a bad value: refused, nothing asked
    page.fill("#id_episodes", "0")
    page.click("#checkpoint-job-form button[type=submit]")
    page.wait_for_selector("#checkpoint-job-field-errors li")
    assert page.text_content("#checkpoint-job-field-errors") == "episodes: Ensure this value is greater than or equal to 1."
    assert job_rows(page) == []

    page.fill("#id_episodes", "3")
    page.click("#checkpoint-job-form button[type=submit]")
    page.wait_for_selector("#checkpoint-jobs li[data-job-id]")
    assert page.is_hidden("#checkpoint-job-field-errors")
    page.wait_for_selector("#checkpoint-jobs li[data-status=succeeded]", timeout=120_000)
    [evaluation] = job_rows(page)
    assert evaluation["job"] == "evaluate, 3 episodes"
    assert re.fullmatch(r"return [\d.]+ ± [\d.]+ episodes \d+ steps long on average", " ".join(evaluation["result"].split()))

    page.select_option("#id_checkpoint", label="periodic, step 1000")
    page.select_option("#id_kind", "video")
    assert page.is_disabled("#id_episodes")
    page.click("#checkpoint-job-form button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#checkpoint-jobs li[data-job-id]').length === 2")
    page.wait_for_selector("#checkpoint-jobs li[data-status=succeeded] video", timeout=120_000)
    video = page.locator("#checkpoint-jobs video.job-video")
    video.scroll_into_view_if_needed()
    page.wait_for_function("document.querySelector('#checkpoint-jobs video').readyState >= 1")
    assert page.evaluate("document.querySelector('#checkpoint-jobs video').duration") > 0
    assert job_rows(page)[0]["job"] == "video" and job_rows(page)[0]["checkpoint"].startswith("periodic")

    page.reload()  # the same list from the server
    assert [row["status"] for row in job_rows(page)] == ["succeeded", "succeeded"]
    page.locator("#checkpoint-job-form").scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "run-checkpoint-jobs.png"), full_page=True)
    assert not errors
