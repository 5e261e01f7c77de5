"""Experiments and runs in a real browser, on the real stack (`python -m rlweb.devserver`: its own Redis,
SQLite, one Celery worker with the beat scheduler, uvicorn), driven by Debian's chromium through Playwright:

- the lost-run reaper (a periodic chore) marks a run whose worker went silent as lost; pages only read;
- a bad value and an algorithm that does not fit the environment are refused next to their fields;
- launch, cancel midway, resume from the checkpoint to the end, clone into a prefilled form and launch that;
- the lists find the runs; screenshots of the form and both lists at desktop and phone widths land in
  docs/screenshots/.

What is costly is made once per module by fixtures (the signed-up browser context; the launched experiment,
its cancelled and resumed run, its clone; the made-up experiments), so each test also runs alone.
"""

from __future__ import annotations

import textwrap
import time

import pytest

from tests.e2e.stack import SCREENSHOTS, painted, sign_up

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

USERNAME, PASSWORD = "hopper", "a long browser password 8"
TOTAL_STEPS = 8_000
CANCEL_AFTER = 1_500
NAME, TAGS = "CartPole, cancelled and resumed", "baseline, resume-test"
TRAINING = {
    "total_steps": str(TOTAL_STEPS), "eval_interval": "2000", "eval_episodes": "3", "checkpoint_interval": "0",
    "hp_learning_starts": "500", "hp_buffer_size": "10000", "hp_batch_size": "32", "hp_train_frequency": "4",
    "hp_gradient_steps": "1", "hp_target_update_interval": "250", "hp_learning_rate": "0.0007",
    "hp_hidden_layers": "64,64",
}  # one small update every 4 steps: fast on a busy CPU
# null-safe: a wait may look while a form's POST is loading the next page, before these exist on it
STATUS = "document.getElementById('run-status')?.textContent"
STEPS_DONE = "parseInt(document.getElementById('run-progress-text')?.textContent)"


def test_the_lost_run_reaper_marks_a_silent_run_lost_without_any_page_view(site_stack):
    run_id = site_stack.orm("""
        from datetime import timedelta
        from django.contrib.auth import get_user_model
        from django.utils import timezone
        from rlweb.experiments.models import Experiment, Run
        owner = get_user_model().objects.create_user("reaper-owner")
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


def open_page(context) -> tuple:
    """A new page in `context`, and the list its script errors go to."""
    page = context.new_page()
    page.set_default_timeout(60_000)
    browser_errors = []
    page.on("pageerror", lambda error: browser_errors.append(str(error)))
    return page, browser_errors


@pytest.fixture(scope="module")
def signed_in(site_stack, browser):
    """A browser context of a user who signed up through the sign-up page (once per module)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page, browser_errors = open_page(context)
    sign_up(page, site_stack.url, USERNAME, PASSWORD)
    page.close()
    assert not browser_errors
    yield context
    context.close()


@pytest.fixture
def page(signed_in):
    """A fresh page of the signed-in user; it must end with no script error."""
    page, browser_errors = open_page(signed_in)
    yield page
    page.close()
    assert not browser_errors


@pytest.fixture(scope="module")
def launched(site_stack, signed_in) -> dict:
    """An experiment launched through the form: its page, its run's page and the run's id."""
    base = site_stack.url
    page, browser_errors = open_page(signed_in)
    page.goto(base + "/experiments/new/")
    page.fill("#id_name", NAME)
    page.fill("#id_env_id", "CartPole-v1")
    page.fill("#id_tags", TAGS)
    for name, value in TRAINING.items():
        page.fill(f"#id_{name}", value)
    page.select_option("#id_device", "cpu")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    experiment_url = page.url
    page.click("#run-table a[data-run-id]")
    page.wait_for_selector("#run-progress")
    run_url = page.url
    page.close()
    assert not browser_errors
    return {"experiment_url": experiment_url, "run_url": run_url, "run_id": int(run_url.rstrip("/").split("/")[-1])}


@pytest.fixture(scope="module")
def cancelled(site_stack, signed_in, launched) -> dict:
    """The launched run, cancelled midway from its page: where it stopped and its status in the database."""
    run_url = launched["run_url"]
    page, browser_errors = open_page(signed_in)
    page.goto(run_url)
    page.wait_for_function(f"{STEPS_DONE} > {CANCEL_AFTER}", timeout=180_000)
    with page.expect_navigation(url=run_url):  # the POST answers with the run page again
        page.click("#cancel-form button")
    page.wait_for_function(f"{STATUS} === 'cancelled'", timeout=60_000)
    # the page hears "finished" a moment before the worker records the status; the resume form needs the row's
    status_in_db = wait_for_status(site_stack, launched["run_id"], "cancelled")
    page.goto(run_url)
    stopped_at = page.evaluate(STEPS_DONE)
    page.close()
    assert not browser_errors
    return {"status_in_db": status_in_db, "stopped_at": stopped_at}


@pytest.fixture(scope="module")
def resumed(site_stack, signed_in, launched, cancelled) -> dict:
    """The cancelled run, resumed from its page and watched there to its end: what the page said."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    run_url = launched["run_url"]
    page, browser_errors = open_page(signed_in)
    page.goto(run_url)
    with page.expect_navigation(url=run_url):
        page.click("#resume-form button")
    status_at_once = page.inner_text("#run-status")
    page.wait_for_function(f"{STATUS} === 'succeeded'", timeout=300_000)
    progress = page.inner_text("#run-progress-text")
    try:  # the duration written live at the end (the test asserts what it says)
        page.wait_for_function("document.getElementById('run-duration')?.textContent.endsWith(' over 2 attempts')",
                               timeout=10_000)
    except PlaywrightTimeout:
        pass
    duration = page.inner_text("#run-duration")
    # the page hears "finished" from the stream a moment before the worker records the status on the row
    status_in_db = wait_for_status(site_stack, launched["run_id"], "succeeded")
    page.close()
    assert not browser_errors
    return {"status_at_once": status_at_once, "progress": progress, "duration": duration,
            "status_in_db": status_in_db}


@pytest.fixture(scope="module")
def cloned(site_stack, signed_in, launched) -> dict:
    """The launched experiment cloned from its page with 3000 steps a run: what the form came filled in with,
    and the clone's page."""
    page, browser_errors = open_page(signed_in)
    page.goto(launched["experiment_url"])
    page.click("#clone-link")
    page.wait_for_selector("#id_name")
    prefilled = {field: page.input_value(f"#id_{field}")
                 for field in ("name", "hp_learning_rate", "hp_hidden_layers", "tags", "total_steps")}
    page.fill("#id_total_steps", "3000")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    clone = {"prefilled": prefilled, "title": page.inner_text("h1"), "meta": page.inner_text(".meta")}
    page.close()
    assert not browser_errors
    return clone


@pytest.fixture(scope="module")
def samples(site_stack, signed_in) -> int:
    """A few made-up experiments of the user, in states a short test cannot reach: the Rainbow one's id."""
    return site_stack.orm(f"USERNAME = {USERNAME!r}\n" + textwrap.dedent(SAMPLE_EXPERIMENTS))


def test_the_form_groups_algorithms_by_family_and_describes_the_chosen_one(page, site_stack):
    import trainer

    page.goto(site_stack.url + "/")
    page.click("text=New experiment")
    page.wait_for_url(site_stack.url + "/experiments/new/")  # eval_on_selector_all reads at once, not waiting
    page.wait_for_selector("#id_algorithm optgroup", state="attached")
    groups = page.eval_on_selector_all("#id_algorithm optgroup", "groups => groups.map(group => group.label)")
    assert groups[:3] == ["DQN family", "Policy gradient", "Continuous control"]
    assert page.inner_text("#id_algorithm_helptext") == trainer.get_spec("dqn").description
    shoot_both_widths(page, "experiment-form")


def test_a_bad_value_and_an_environment_the_algorithm_cannot_act_in_are_refused_next_to_their_fields(page, site_stack):
    page.goto(site_stack.url + "/experiments/new/")
    page.fill("#id_name", NAME)
    page.fill("#id_env_id", "Pendulum-v1")
    page.fill("#id_hp_learning_rate", "0")
    page.fill("#id_tags", TAGS)
    page.click("text=Create and launch")
    assert "must be greater than 0" in page.inner_text("#id_hp_learning_rate_error")
    assert "dqn needs Discrete actions" in page.inner_text("#id_env_id_error")
    assert page.input_value("#id_tags") == "baseline, resume-test"  # what was typed stays


def test_a_run_cancelled_midway_stops_at_its_next_check_with_a_final_checkpoint(page, launched, cancelled):
    assert cancelled["status_in_db"] == "cancelled"
    assert CANCEL_AFTER < cancelled["stopped_at"] < TOTAL_STEPS
    page.goto(launched["run_url"])
    page.wait_for_selector('a[data-checkpoint-tag="final"]')


def test_a_cancelled_run_resumes_from_its_checkpoint_to_the_end(resumed):
    assert resumed["status_at_once"] in ("queued", "running")
    assert resumed["progress"] == f"{TOTAL_STEPS} / {TOTAL_STEPS} steps"
    # the duration written live at the end counts both attempts
    assert resumed["duration"].endswith(" over 2 attempts"), resumed["duration"]
    assert resumed["status_in_db"] == "succeeded"


def test_the_resumed_attempt_numbers_its_events_after_those_of_the_cancelled_one(site_stack, launched, cancelled,
                                                                                 resumed):
    history = site_stack.orm(f"""
        from rlweb.experiments.models import Event, Run
        run = Run.objects.get(pk={launched["run_id"]})
        events = Event.objects.filter(run=run).order_by("seq")
        result = {{"start_step": run.start_step, "seqs": list(events.values_list("seq", flat=True)),
                  "forgotten": run.forgotten_seqs,
                  "evals": list(events.filter(kind="eval").values_list("step", flat=True)),
                  "finished": list(events.filter(kind="finished").values_list("step", flat=True))}}
    """)
    assert history["start_step"] == cancelled["stopped_at"]
    # the resumed attempt numbers its events after every one the cancelled attempt sent (forgotten from its
    # final checkpoint on), so a page that reconnects with an old id never mixes the two
    (kept, through), = history["forgotten"]
    resumed_events = len(history["seqs"]) - kept
    assert history["seqs"] == list(range(1, kept + 1)) + list(range(through + 1, through + 1 + resumed_events))
    assert history["evals"] == [2000, 4000, 6000, 8000] and history["finished"] == [TOTAL_STEPS]


def test_a_clone_comes_filled_in_with_every_hyperparameter_and_launches_with_a_changed_value(cloned):
    prefilled = cloned["prefilled"]
    assert prefilled["name"] == "CartPole, cancelled and resumed (copy)"
    assert prefilled["hp_learning_rate"] == "0.0007"
    assert prefilled["hp_hidden_layers"] == "64,64"
    assert prefilled["tags"] == "baseline, resume-test"
    assert prefilled["total_steps"] == str(TOTAL_STEPS)
    assert cloned["title"] == "CartPole, cancelled and resumed (copy)"
    assert "3000 steps per run" in cloned["meta"]


def test_the_experiment_list_shows_each_experiment_of_the_user(page, site_stack, launched, cloned, request):
    # both experiments; then the made-up ones beside them (made here, the first time the module needs them)
    page.goto(site_stack.url + "/")
    assert page.locator("#experiment-table tbody tr").count() == 2
    request.getfixturevalue("samples")
    page.reload()
    assert page.locator("#experiment-table tbody tr").count() == 5
    shoot_both_widths(page, "experiment-list")


def test_the_run_list_filters_by_status_and_tag(page, site_stack, launched, resumed, cloned, samples):
    page.goto(site_stack.url + "/runs/?status=succeeded&tag=resume-test")
    rows = page.locator("#run-list-table tbody tr")
    shown = rows.evaluate_all("rows => rows.map((row) => Number(row.dataset.runId))")
    # the resumed run, and the clone's short run when it has already finished; none of the made-up ones
    run_id = launched["run_id"]
    assert run_id in shown and len(shown) <= 2, f"shown: {shown}; in the database: {statuses(site_stack)}"
    assert all("succeeded" in text and "resume-test" in text for text in rows.all_text_contents())


def test_the_run_list_sorted_by_progress_fits_the_window(page, site_stack, resumed, cloned, samples):
    page.goto(site_stack.url + "/runs/?sort=-progress")
    width, room = page.evaluate("(wrap => [wrap.scrollWidth, wrap.clientWidth])(document.querySelector('.table-wrap'))")
    assert width <= room, f"the run list is {width} pixels wide in a {room}-pixel window: its last columns hide"
    shoot_both_widths(page, "run-list")


def test_the_run_list_says_it_cannot_sort_by_an_unknown_column(page, site_stack):
    page.goto(site_stack.url + "/runs/?sort=nonsense")
    assert "Cannot sort by" in page.inner_text(".messages")


def test_the_account_menu_holds_the_users_own_pages_behind_their_name(page, site_stack):
    page.goto(site_stack.url + "/")
    menu = page.locator("details.account-menu")
    assert menu.locator("summary").inner_text().strip() == USERNAME
    assert not page.get_by_role("link", name="API tokens").is_visible()  # closed until asked
    header_height = page.locator(".site-header").bounding_box()["height"]
    assert header_height < 80, f"the header wraps onto a second line: {header_height}px"
    menu.locator("summary").click()
    page.screenshot(path=str(SCREENSHOTS / "account-menu.png"), clip={"x": 640, "y": 0, "width": 640, "height": 300})
    page.get_by_role("link", name="API tokens").click()
    page.wait_for_url(site_stack.url + "/account/tokens/")
    page.locator("details.account-menu summary").click()
    page.get_by_role("link", name="Alerts").click()
    page.wait_for_url(site_stack.url + "/account/alerts/")


def test_an_experiment_is_deleted_after_a_confirmation(page, site_stack, signed_in):
    base = site_stack.url
    # its own experiment (like the made-up Rainbow one, with a run), so the others' stay
    doomed = site_stack.orm(f"""
        from django.contrib.auth import get_user_model
        from rlweb.experiments.models import Experiment, Run
        experiment = Experiment.objects.create(owner=get_user_model().objects.get(username={USERNAME!r}),
                                               name="Rainbow on Breakout", algorithm="rainbow",
                                               env_id="ALE/Breakout-v5", tags=["atari"], total_steps=10_000_000,
                                               hyperparameters={{}}, auto_resume=False)
        Run.objects.create(experiment=experiment, seed=0, total_steps=10_000_000, status="lost")
        result = experiment.pk
    """)
    page.goto(base + "/")
    before = page.locator("#experiment-table tbody tr").count()
    page.goto(f"{base}/experiments/{doomed}/")
    page.click("text=Delete…")
    page.click("text=Delete for good")
    page.wait_for_url(base + "/")
    assert "Deleted “Rainbow on Breakout”" in page.inner_text(".messages")
    assert page.locator("#experiment-table tbody tr").count() == before - 1
