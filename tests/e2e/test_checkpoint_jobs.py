"""Jobs on a checkpoint from the run page, in a real browser against the real stack: once the run has
checkpoints, "Act on a checkpoint" evaluates one for N episodes or records a video of it on the run's worker;
the list shows the job waiting, then its return or a video that plays; a bad value is refused next to the form;
an unfinished job has a Cancel button. Screenshots: docs/screenshots/run-checkpoint-jobs.png and
run-checkpoint-job-cancel.png."""

from __future__ import annotations

import os
import re
import signal

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.e2e.stack import SCREENSHOTS, launch_experiment, sign_up, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

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
    page.set_default_timeout(60_000)
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


def test_a_job_asked_while_its_run_trains_is_done_at_once_and_a_waiting_one_is_cancelled_from_the_page(
        site_stack, site, browser):
    """Checkpoint jobs have a worker of their own (queue jobs): a job asked while the run trains is done at once, the
    run still training. With that worker paused (SIGSTOP), jobs wait in its queue: their Cancel button ends them at
    once, and once it goes on the worker skips their messages (revoked) instead of doing them."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, site, "canceller", PASSWORD)
    # long enough to train through the test, and checkpoints far enough apart that retention (the latest 20) deletes
    # none of them while the form offers them
    launch_experiment(page, site, "Cancel a job", {**TRAINING, "total_steps": "1000000",
                                                   "checkpoint_interval": "50000"})
    page.wait_for_selector("#checkpoint-job-form:not([hidden])", timeout=240_000)  # the first checkpoint, live
    jobs_url = page.get_attribute("#run-page", "data-jobs-url")
    live_jobs_workers = """
        from rlweb.experiments import workers
        result = [worker.pid for worker in workers.live_workers() if worker.queues == ["jobs"]]
    """
    # the jobs worker in the registry: else a job goes to the run's own queue, behind the training run
    wait_until(lambda: site_stack.orm(live_jobs_workers), 60, "the jobs worker is not in the registry",
               lambda: (site_stack.var / "jobs-worker.log").read_text()[-4000:])
    page.fill("#id_episodes", "2")
    page.click("#checkpoint-job-form button[type=submit]")
    page.wait_for_selector("#checkpoint-jobs li[data-status=succeeded], #checkpoint-jobs li[data-status=failed]",
                           timeout=120_000)
    [done] = job_rows(page)
    assert done["status"] == "succeeded", (done, site_stack.orm("""
        from rlweb.experiments.models import CheckpointJob
        result = list(CheckpointJob.objects.values("status", "queue", "error"))
    """), (site_stack.var / "jobs-worker.log").read_text()[-4000:])
    assert page.text_content("#run-status").strip() == "running"  # done beside the training run, not after it
    assert done["job"] == "evaluate, 2 episodes"

    jobs_worker = site_stack.orm(live_jobs_workers)
    assert len(jobs_worker) == 1, jobs_worker
    jobs_log = site_stack.var / "jobs-worker.log"
    earlier = len(jobs_log.read_text())  # the log of the shared site's jobs worker: what other modules' jobs wrote
    os.kill(jobs_worker[0], signal.SIGSTOP)
    try:
        cancel_waiting_jobs(page, jobs_url)
    finally:
        os.kill(jobs_worker[0], signal.SIGCONT)
    wait_until(lambda: len(re.findall(r"Discarding revoked task: rlweb\.checkpoint_job|is not queued any more: skipping",
                                      jobs_log.read_text()[earlier:])) >= 2, 120,
               "the jobs worker did not skip both jobs' messages", lambda: jobs_log.read_text()[-4000:])
    page.reload()
    assert [row["status"] for row in job_rows(page)] == ["cancelled", "cancelled", "succeeded"]
    page.click("#cancel-form button[type=submit]")
    page.wait_for_function("document.getElementById('run-status').textContent.trim() === 'cancelled'",
                           timeout=120_000)
    assert not errors


def submit_job(page) -> None:
    """Ask the job, again when the checkpoint chosen was replaced meanwhile (a new best one, live while the run
    trains: the form then offers the new one, and a user asks again)."""
    for _ in range(3):
        with page.expect_response(lambda response: response.request.method == "POST" and "/jobs" in response.url):
            page.click("#checkpoint-job-form button[type=submit]")
        page.wait_for_timeout(300)  # the answer taken in: a refusal shows by the field
        if "replaces the one before" not in (page.text_content("#checkpoint-job-field-errors") or ""):
            return
        page.wait_for_timeout(1000)  # the live event of the new checkpoint reaches the form
    pytest.fail("the checkpoint chosen was replaced three times in a row")


def cancel_waiting_jobs(page, jobs_url: str) -> None:
    """Ask two jobs while the jobs worker is paused, and cancel both from the page."""
    page.fill("#id_episodes", "5")
    submit_job(page)
    page.wait_for_selector("#checkpoint-jobs li[data-status=queued] form.job-cancel button")
    page.select_option("#id_kind", "video")
    submit_job(page)
    try:
        page.wait_for_function("document.querySelectorAll('#checkpoint-jobs li[data-status=queued]').length === 2")
    except PlaywrightTimeoutError:  # once in a fresh-clone CI, with both posts answered 200: what the page showed
        shown = {selector: page.text_content(selector).strip() for selector in
                 ("#run-status", "#checkpoint-job-status", "#checkpoint-job-errors", "#checkpoint-job-field-errors")}
        pytest.fail(f"not 2 queued jobs: {job_rows(page)}; {shown}")
    assert all("waits for a worker of queue jobs" in " ".join(row["result"].split()) for row in job_rows(page)[:2])
    # the page polls the list every 2 s while jobs wait, but leaves it in place while nothing in it changed:
    # a list replaced under the pointer swallowed a click on its Cancel button (a CI failure)
    page.evaluate("window.shownJobList = document.getElementById('checkpoint-jobs')")
    for _ in range(3):  # three more polls, each answered and taken in before the next is sent
        with page.expect_response(lambda response: response.url.endswith(jobs_url) and response.request.method == "GET",
                                  timeout=30_000):
            pass
    assert page.evaluate("window.shownJobList.isConnected")
    page.click("#checkpoint-jobs li[data-status=queued] form.job-cancel button")  # the newest: the video
    page.wait_for_selector("#checkpoint-jobs li[data-status=cancelled]")
    video, evaluation, _ = job_rows(page)
    assert (video["job"], video["status"], video["result"]) == ("video", "cancelled", "cancelled before a worker took it")
    assert evaluation["status"] == "queued" and page.locator("#checkpoint-jobs form.job-cancel").count() == 1
    card = page.locator("section.card", has=page.locator("#checkpoint-jobs"))
    card.scroll_into_view_if_needed()
    card.screenshot(path=str(SCREENSHOTS / "run-checkpoint-job-cancel.png"))

    page.click("#checkpoint-jobs li[data-status=queued] form.job-cancel button")
    page.wait_for_function("document.querySelectorAll('#checkpoint-jobs li[data-status=cancelled]').length === 2")
    assert page.locator("#checkpoint-jobs form.job-cancel").count() == 0
    assert page.get_attribute("#checkpoint-jobs", "data-unfinished") == "0"
