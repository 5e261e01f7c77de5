"""Experiments and runs in a real browser, on the real stack (`python -m rlweb.devserver`: its own Redis,
SQLite, one Celery worker with the beat scheduler, uvicorn), driven by Debian's chromium through Playwright:

- the lost-run reaper (a periodic chore) marks a run whose worker went silent as lost; pages only read;
- a bad value and an algorithm that does not fit the environment are refused next to their fields;
- launch, cancel midway, resume from the checkpoint to the end, clone into a prefilled form and launch that;
- the lists find the runs; screenshots of the form and both lists at desktop and phone widths land in
  docs/screenshots/.
"""

from __future__ import annotations

import textwrap
import time

import pytest

from tests.e2e.stack import SCREENSHOTS, painted, sign_up

pytestmark = pytest.mark.e2e

USERNAME, PASSWORD = "grace", "a long browser password 8"
TOTAL_STEPS = 8_000
CANCEL_AFTER = 1_500
TRAINING = {
    "total_steps": str(TOTAL_STEPS), "eval_interval": "2000", "eval_episodes": "3", "checkpoint_interval": "0",
    "hp_learning_starts": "500", "hp_buffer_size": "10000", "hp_batch_size": "32", "hp_train_frequency": "4",
    "hp_gradient_steps": "1", "hp_target_update_interval": "250", "hp_learning_rate": "0.0007",
    "hp_hidden_layers": "64,64",
}  # one small update every 4 steps: fast on a busy CPU
# null-safe: a wait may look while a form's POST is loading the next page, before these exist on it
STATUS = "document.getElementById('run-status')?.textContent"
STEPS_DONE = "parseInt(document.getElementById('run-progress-text')?.textContent)"


def test_the_sweep_marks_a_silent_run_lost_without_any_page_view(site_stack):
    run_id = site_stack.orm("""
        from datetime import timedelta
        from django.contrib.auth import get_user_model
        from django.utils import timezone
        from rlweb.experiments.models import Experiment, Run
        from rlweb.accounts.models import SiteSettings
        owner = get_user_model().objects.create_user("sweep-owner")
        SiteSettings.objects.update_or_create(pk=1, defaults={"signup_open": True})  # the next test signs up
        experiment = Experiment.objects.create(owner=owner, name="silent", algorithm="dqn", env_id="CartPole-v1",
                                               total_steps=100, auto_resume=False)  # else queued again at once
        result = Run.objects.create(experiment=experiment, total_steps=100, status="running",
                                    heartbeat_at=timezone.now() - timedelta(days=1)).pk
    """)
    assert wait_for_status(site_stack, run_id, "lost", seconds=120) == "lost"  # beat sends the reaper every 10 s


SAMPLE_EXPERIMENTS = """
    from datetime import timedelta
    from django.contrib.auth import get_user_model
    from django.utils import timezone
    from rlweb.experiments.models import Experiment, Run
    owner, now = get_user_model().objects.get(username=USERNAME), timezone.now()
    ago = lambda **delta: now - timedelta(**delta)
    samples = [
        ("PPO on Acrobot, clip 0.1", "ppo", "Acrobot-v1", ["sweep", "clip"], 200_000, [
            # no worker beats for this sample: a heartbeat a day ahead keeps the reaper from taking it as lost
            dict(status="running", steps_done=84_000, started_at=ago(minutes=7), heartbeat_at=ago(days=-1),
                 eval_return_mean=-112.4, best_eval_return=-98.0),
            dict(status="queued")]),
        ("SAC Pendulum baseline", "sac", "Pendulum-v1", ["baseline"], 20_000, [
            dict(status="succeeded", steps_done=20_000, started_at=ago(hours=3), finished_at=ago(hours=2),
                 eval_return_mean=-162.0, best_eval_return=-145.3),
            dict(status="failed", steps_done=3_100, started_at=ago(hours=3), finished_at=ago(hours=2, minutes=55),
                 error="RuntimeError: CUDA out of memory")]),
        ("Rainbow on Breakout", "rainbow", "ALE/Breakout-v5", ["atari"], 10_000_000, [
            dict(status="lost", steps_done=2_350_000, started_at=ago(days=1), finished_at=ago(hours=20),
                 eval_return_mean=41.2, best_eval_return=55.0)]),
    ]
    for name, algorithm, env_id, tags, total, runs in samples:
        experiment = Experiment.objects.create(owner=owner, name=name, algorithm=algorithm, env_id=env_id,
                                               tags=tags, total_steps=total, hyperparameters={}, auto_resume=False)
        for seed, fields in enumerate(runs):  # those that started did so once
            Run.objects.create(experiment=experiment, seed=seed, total_steps=total,
                               first_started_at=fields.get("started_at"), attempts=int("started_at" in fields),
                               **fields)
    result = Experiment.objects.get(name="Rainbow on Breakout").pk
"""


def statuses(site_stack) -> dict:
    return site_stack.orm("from rlweb.experiments.models import Run\n"
                          "result = {run.pk: run.status for run in Run.objects.order_by('pk')}")


def wait_for_status(site_stack, run_id: int, status: str, seconds: float = 60) -> str:
    """The run's status in the database once it is `status`, or whatever it is after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        now = statuses(site_stack)[str(run_id)]
        if now == status or time.monotonic() > deadline:
            return now
        time.sleep(0.5)


def shoot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def shoot_both_widths(page, name: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 800})
    shoot(page, name)
    page.set_viewport_size({"width": 390, "height": 844})
    painted(page)
    shoot(page, f"{name}-narrow")
    page.set_viewport_size({"width": 1280, "height": 800})


def test_a_user_launches_cancels_resumes_and_clones_an_experiment(site_stack, browser):
    import trainer

    base = site_stack.url
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(30_000)
    browser_errors = []
    page.on("pageerror", lambda error: browser_errors.append(str(error)))

    sign_up(page, base, USERNAME, PASSWORD)

    # the form: algorithms grouped by family, the chosen one described under the list
    page.click("text=New experiment")
    groups = page.eval_on_selector_all("#id_algorithm optgroup", "groups => groups.map(group => group.label)")
    assert groups[:3] == ["DQN family", "Policy gradient", "Continuous control"]
    assert page.inner_text("#id_algorithm_helptext") == trainer.get_spec("dqn").description
    shoot_both_widths(page, "experiment-form")

    # a bad value and an environment dqn cannot act in are refused next to their fields; nothing is queued
    page.fill("#id_name", "CartPole, cancelled and resumed")
    page.fill("#id_env_id", "Pendulum-v1")
    page.fill("#id_hp_learning_rate", "0")
    page.fill("#id_tags", "baseline, resume-test")
    page.click("text=Create and launch")
    assert "must be greater than 0" in page.inner_text("#id_hp_learning_rate_error")
    assert "dqn needs Discrete actions" in page.inner_text("#id_env_id_error")
    assert page.input_value("#id_tags") == "baseline, resume-test"  # what was typed stays

    # fix them and launch
    page.fill("#id_env_id", "CartPole-v1")
    for name, value in TRAINING.items():
        page.fill(f"#id_{name}", value)
    page.select_option("#id_device", "cpu")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    experiment_url = page.url
    page.click("#run-table a[data-run-id]")
    page.wait_for_selector("#run-progress")
    run_url = page.url

    # cancel midway: the run stops at its next check, saves a final checkpoint and ends cancelled
    page.wait_for_function(f"{STEPS_DONE} > {CANCEL_AFTER}", timeout=180_000)
    with page.expect_navigation(url=run_url):  # the POST answers with the run page again
        page.click("#cancel-form button")
    page.wait_for_function(f"{STATUS} === 'cancelled'", timeout=60_000)
    # the page hears "finished" a moment before the worker records the status; the resume form needs the row's
    run_id = int(run_url.rstrip("/").split("/")[-1])
    assert wait_for_status(site_stack, run_id, "cancelled") == "cancelled"
    page.goto(run_url)
    stopped_at = page.evaluate(STEPS_DONE)
    assert CANCEL_AFTER < stopped_at < TOTAL_STEPS
    page.wait_for_selector('a[data-checkpoint-tag="final"]')

    # resume: it goes on from that checkpoint to the end
    with page.expect_navigation(url=run_url):
        page.click("#resume-form button")
    assert page.inner_text("#run-status") in ("queued", "running")
    page.wait_for_function(f"{STATUS} === 'succeeded'", timeout=300_000)
    assert page.inner_text("#run-progress-text") == f"{TOTAL_STEPS} / {TOTAL_STEPS} steps"
    # the duration written live at the end counts both attempts
    page.wait_for_function("document.getElementById('run-duration')?.textContent.endsWith(' over 2 attempts')",
                           timeout=10_000)
    # the page hears "finished" from the stream a moment before the worker records the status on the row
    assert wait_for_status(site_stack, run_id, "succeeded") == "succeeded"
    history = site_stack.orm(f"""
        from rlweb.experiments.models import Event, Run
        run = Run.objects.get(pk={run_id})
        events = Event.objects.filter(run=run).order_by("seq")
        result = {{"start_step": run.start_step, "seqs": list(events.values_list("seq", flat=True)),
                  "forgotten": run.forgotten_seqs,
                  "evals": list(events.filter(kind="eval").values_list("step", flat=True)),
                  "finished": list(events.filter(kind="finished").values_list("step", flat=True))}}
    """)
    assert history["start_step"] == stopped_at
    # the resumed attempt numbers its events after every one the cancelled attempt sent (forgotten from its
    # final checkpoint on), so a page that reconnects with an old id never mixes the two
    (kept, through), = history["forgotten"]
    resumed = len(history["seqs"]) - kept
    assert history["seqs"] == list(range(1, kept + 1)) + list(range(through + 1, through + 1 + resumed))
    assert history["evals"] == [2000, 4000, 6000, 8000] and history["finished"] == [TOTAL_STEPS]

    # clone: the form comes filled in, every hyperparameter included; change one value and launch
    page.goto(experiment_url)
    page.click("#clone-link")
    page.wait_for_selector("#id_name")
    assert page.input_value("#id_name") == "CartPole, cancelled and resumed (copy)"
    assert page.input_value("#id_hp_learning_rate") == "0.0007"
    assert page.input_value("#id_hp_hidden_layers") == "64,64"
    assert page.input_value("#id_tags") == "baseline, resume-test"
    assert page.input_value("#id_total_steps") == str(TOTAL_STEPS)
    page.fill("#id_total_steps", "3000")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    assert page.inner_text("h1") == "CartPole, cancelled and resumed (copy)"
    assert "3000 steps per run" in page.inner_text(".meta")

    # the lists: both experiments; the runs, filtered by status and tag (with a few made-up experiments
    # beside them, in states a short test cannot reach, for the screenshots)
    page.goto(base + "/")
    assert page.locator("#experiment-table tbody tr").count() == 2
    rainbow = site_stack.orm(f"USERNAME = {USERNAME!r}\n" + textwrap.dedent(SAMPLE_EXPERIMENTS))
    page.reload()
    assert page.locator("#experiment-table tbody tr").count() == 5
    shoot_both_widths(page, "experiment-list")
    page.goto(base + "/runs/?status=succeeded&tag=resume-test")
    rows = page.locator("#run-list-table tbody tr")
    shown = rows.evaluate_all("rows => rows.map((row) => Number(row.dataset.runId))")
    # the resumed run, and the clone's short run when it has already finished; none of the made-up ones
    assert run_id in shown and len(shown) <= 2, f"shown: {shown}; in the database: {statuses(site_stack)}"
    assert all("succeeded" in text and "resume-test" in text for text in rows.all_text_contents())
    page.goto(base + "/runs/?sort=-progress")
    width, room = page.evaluate("(wrap => [wrap.scrollWidth, wrap.clientWidth])(document.querySelector('.table-wrap'))")
    assert width <= room, f"the run list is {width} pixels wide in a {room}-pixel window: its last columns hide"
    shoot_both_widths(page, "run-list")
    page.goto(base + "/runs/?sort=nonsense")
    assert "Cannot sort by" in page.inner_text(".messages")

    # delete, after a confirmation
    page.goto(f"{base}/experiments/{rainbow}/")
    page.click("text=Delete…")
    page.click("text=Delete for good")
    page.wait_for_url(base + "/")
    assert "Deleted “Rainbow on Breakout”" in page.inner_text(".messages")
    assert page.locator("#experiment-table tbody tr").count() == 4

    assert not browser_errors
    context.close()
