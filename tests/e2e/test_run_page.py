"""The run page in a real browser against the real stack (devserver: Redis, worker, uvicorn): charts of
every metric grow live, the smoothing and axis controls change what is drawn, zoom survives new
points, episode videos appear live and play, the log grows, checkpoints and the CSV download.
Screenshots of the page (desktop and narrow) land in docs/screenshots/.
"""

from __future__ import annotations

import csv
import io
import zipfile

import pytest

from tests.e2e.stack import SCREENSHOTS, charts_fit, launch_experiment, sign_up

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

USERNAME, PASSWORD = "grace", "a long browser password 9"
# as short as shows everything (3 videos, evals, a periodic checkpoint): training is most of this test's time
TOTAL_STEPS = 3_000
TRAINING = {
    "total_steps": str(TOTAL_STEPS), "eval_interval": "1000", "eval_episodes": "2", "checkpoint_interval": "1500",
    "video_interval": "1000", "hp_learning_starts": "500", "hp_buffer_size": "10000", "hp_batch_size": "32",
    "hp_train_frequency": "4", "hp_target_update_interval": "250", "hp_learning_rate": "0.001",
    "hp_hidden_layers": "64,64",
}
RETURNS = "document.querySelector('[data-metric=\"rollout/episode_return\"] .chart')"
STATUS = "document.getElementById('run-status')"


def trace(chart: str, name: str) -> str:
    """A JS expression: the trace called `name` of a chart (undefined until it is drawn)."""
    return f"((({chart} || {{}}).data || []).find((trace) => trace.name === '{name}'))"


def points(chart: str) -> str:
    return f"({trace(chart, 'raw')} || {{x: []}}).x.length"


def launch(page, site_url: str) -> None:
    sign_up(page, site_url, USERNAME, PASSWORD)
    launch_experiment(page, site_url, "Run page in the browser", TRAINING)
    page.wait_for_selector("#charts")


def test_the_run_page_follows_a_run_live_and_its_controls_work(site, browser, tmp_path):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    launch(page, site)
    # the Environment card, drawn by the server before the worker recorded anything, fills in as the run starts
    recorded_at_load = page.evaluate("document.getElementById('environment-empty') === null")

    # a chart per metric, growing live
    page.wait_for_function(f"{points(RETURNS)} > 2", timeout=180_000)
    first = page.evaluate(points(RETURNS))
    page.wait_for_function(f"{points(RETURNS)} > {first}", timeout=120_000)
    # charts are drawn while on screen: the loss chart may be below the fold, under the live-change form
    page.wait_for_selector('[data-metric="train/loss"]', state="attached", timeout=120_000)
    page.locator('[data-metric="train/loss"]').scroll_into_view_if_needed()
    page.wait_for_selector('[data-metric="train/loss"] .chart .scatterlayer', timeout=120_000)
    page.evaluate("window.scrollTo(0, 0)")
    metrics = page.eval_on_selector_all(".chart-card", "(cards) => cards.map((card) => card.dataset.metric)")
    assert {"rollout/episode_return", "rollout/episode_length", "train/loss", "train/epsilon"} <= set(metrics)

    # smoothing: off draws the raw line alone, on adds a smoothed line that differs from it
    page.fill("#smoothing", "0")
    assert page.evaluate(f"{trace(RETURNS, 'smoothed')} === undefined")
    page.fill("#smoothing", "0.9")
    raw, smoothed = page.evaluate(f"[{trace(RETURNS, 'raw')}.y, {trace(RETURNS, 'smoothed')}.y]")
    assert len(raw) == len(smoothed) and raw != smoothed and smoothed[0] == pytest.approx(raw[0])

    # x axis: wall time instead of env steps; log y
    steps = page.evaluate(f"Array.from({trace(RETURNS, 'raw')}.x)")
    page.select_option("#x-axis", "time")
    seconds = page.evaluate(f"Array.from({trace(RETURNS, 'raw')}.x)")
    assert page.evaluate(f"{RETURNS}.layout.xaxis.title.text") == "wall time (s)"
    assert seconds[:len(steps)] != steps and seconds == sorted(seconds) and max(seconds) < max(steps)
    page.check("#log-y")
    assert page.evaluate(f"{RETURNS}.layout.yaxis.type") == "log"
    page.uncheck("#log-y")
    page.select_option("#x-axis", "step")
    # tick labels get the room they need; a constant that differs only by rounding (an epsilon at its end,
    # averaged per log interval) is drawn flat in a padded range, not zoomed into a band 1e-17 wide
    assert page.evaluate(f"{RETURNS}.layout.yaxis.automargin") is True
    # (the page's module, as the browser loaded it; tests/js/smoothing.test.mjs tests it under node)
    flat_range = "(arrays) => import('/static/experiments/lib/smoothing.js').then((module) => module.flatRange(arrays))"
    assert page.evaluate(flat_range, [[0.04, 0.040000000000000036, 0.039999999999999994]]) == pytest.approx([0.02, 0.06])
    assert page.evaluate(flat_range, [[-20.5, -19.25, None]]) is None

    # a zoom survives the points that come after it
    page.evaluate(f"Plotly.relayout({RETURNS}, {{'xaxis.range': [0, 1000]}})")
    zoomed_at = page.evaluate(points(RETURNS))
    page.wait_for_function(f"{points(RETURNS)} > {zoomed_at} || {STATUS}.textContent === 'succeeded'",
                           timeout=120_000)
    assert page.evaluate(f"Array.from({RETURNS}.layout.xaxis.range)") == [0, 1000]
    page.evaluate(f"Plotly.relayout({RETURNS}, {{'xaxis.autorange': true}})")

    # videos appear while the page is open, newest first, and play
    page.wait_for_function(f"{STATUS}.textContent === 'succeeded'", timeout=300_000)
    # at the end every chart is up to date, also those off screen (they skip live redraws until seen)
    undrawn = """Array.from(document.querySelectorAll('.chart-card')).filter((card) => {
        const raw = (card.querySelector('.chart').data || []).find((trace) => trace.name === 'raw');
        return !raw || raw.x.length === 0; }).map((card) => card.dataset.metric)"""
    page.wait_for_function(f"({undrawn}).length === 0", timeout=10_000)
    # the System group (trainer/system_metrics.py): folded below the main charts, sized to the page when opened
    assert page.inner_text("#system-group > summary").startswith("System")
    assert page.locator('#charts [data-metric^="system/"]').count() == 0
    page.click("#system-group > summary")
    system_chart = "document.querySelector('#system-charts [data-metric=\"system/rss_mb\"] .chart')"
    page.wait_for_function(f"Math.abs({system_chart}.querySelector('.main-svg').getBoundingClientRect().width - "
                           f"{system_chart}.clientWidth) < 3")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#system-group").screenshot(path=str(SCREENSHOTS / "run-system-metrics.png"))
    assert page.inner_text("#run-finished") == "just now" and page.inner_text("#run-duration").endswith(" s")
    page.wait_for_function("document.querySelectorAll('#video-list video').length === 3")
    captions = page.eval_on_selector_all("#video-list figcaption", "(all) => all.map((item) => item.textContent)")
    assert [caption.split(" · ")[0] for caption in captions] == ["step 3000", "step 2000", "step 1000"]
    page.wait_for_function("document.querySelector('#video-list video').readyState >= 1", timeout=30_000)
    duration = page.evaluate("document.querySelector('#video-list video').duration")
    assert 0 < duration < 60
    page.evaluate("(video => { video.muted = true; return video.play(); })(document.querySelector('#video-list video'))")
    page.wait_for_function("document.querySelector('#video-list video').currentTime > 0", timeout=30_000)

    # the log grew live: the run's lifecycle in order
    log = page.eval_on_selector_all("#log-list li", "(items) => items.map((item) => item.className)")
    assert log[0] == "log-started" and log[-1] == "log-finished"
    assert {"log-eval", "log-checkpoint", "log-video"} <= set(log)

    # checkpoints and the full data download
    with page.expect_download() as download:
        page.click('a[data-checkpoint-tag="final"]')
    checkpoint = tmp_path / "final.zip"
    download.value.save_as(checkpoint)
    assert set(zipfile.ZipFile(checkpoint).namelist()) == {"config.json", "model.safetensors"}
    with page.expect_download() as download:
        page.click("#csv-link")
    rows = list(csv.reader(io.StringIO(download.value.path().read_text())))
    assert rows[0][:4] == ["seq", "kind", "step", "time"] and "rollout/episode_return" in rows[0]
    assert rows[1][1] == "started" and rows[-1][1] == "finished"

    # the Environment card, drawn again as the run started (when the page came before the worker recorded what made
    # the run, as it mostly does; else it is drawn again here): its Copy button puts the command that trains the
    # run again on the clipboard
    if recorded_at_load:
        page.evaluate("""() => {
            document.getElementById('run-environment').replaceChildren();
            return import('/static/experiments/run/details.js').then((module) => module.refreshEnvironment()); }""")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site)
    page.locator("#run-environment").scroll_into_view_if_needed()
    page.wait_for_selector('#run-environment [data-field="torch"]', timeout=10_000)
    command = page.evaluate("document.getElementById('repeat-command').textContent")
    assert command.startswith("python -m trainer train ") and f"--total-steps {TOTAL_STEPS} " in command
    page.click("#copy-command")
    page.wait_for_function("document.getElementById('copy-command-status').textContent === 'Copied'")
    assert page.evaluate("navigator.clipboard.readText()") == command

    # after a reload the page draws the same history
    drawn = page.evaluate(points(RETURNS))
    page.reload()
    page.wait_for_function("document.getElementById('run-page')?.dataset.ready === '1'")
    if drawn <= 512:  # under MAX_BUCKETS the history holds every point (history.py)
        assert page.evaluate(points(RETURNS)) == drawn
    # and drawn by the server after the reload, the same
    page.locator("#run-environment").scroll_into_view_if_needed()
    assert page.evaluate("document.getElementById('repeat-command').textContent") == command
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#run-environment").screenshot(path=str(SCREENSHOTS / "run-environment.png"))
    page.evaluate("window.scrollTo(0, 0)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "run-page.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    page.wait_for_function("document.getElementById('run-page')?.dataset.ready === '1'")
    charts_fit(page)  # plotly draws to the narrow page
    page.screenshot(path=str(SCREENSHOTS / "run-page-narrow.png"), full_page=True)
    assert not errors
    context.close()


def test_open_pages_follow_queued_runs_as_they_start_and_end_without_a_reload(site, browser):  # noqa: F811
    """While runs are queued or running, the experiment's page and the run list draw their rows again by themselves
    (ticked boxes stay ticked), and the page of a run still queued fills in its Environment card as the run starts.
    The site's one worker trains one run at a time: the second seed waits for the first."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors = []
    context.on("weberror", lambda error: errors.append(str(error.error)))
    sign_up(page, site, "ida", PASSWORD)
    launch_experiment(page, site, "Followed without a reload", {  # seed 0 long enough to open three pages meanwhile
        **TRAINING, "total_steps": "20000", "num_seeds": "2", "video_interval": "0", "checkpoint_interval": "0",
        "eval_interval": "0", "hp_gradient_steps": "1"})
    experiment_page = page
    experiment_page.go_back()
    experiment_page.wait_for_selector("#run-table a[data-run-id]")
    experiment_page.evaluate("window.notReloaded = true")
    first, second = sorted(experiment_page.eval_on_selector_all(
        "#run-table a[data-run-id]", "(links) => links.map((link) => Number(link.dataset.runId))"))
    statuses = "Array.from(document.querySelectorAll('#run-table tbody .status')).map((status) => status.textContent)"
    assert experiment_page.evaluate(statuses)[1] == "queued"

    run_list = context.new_page()
    run_list.goto(f"{site}/runs/")
    run_list.check(f'input[name="runs"][value="{first}"]')
    run_list.evaluate("window.notReloaded = true")

    run_page = context.new_page()
    run_page.goto(f"{site}/runs/{second}/")
    run_page.wait_for_function("document.getElementById('run-page')?.dataset.ready === '1'")
    assert run_page.inner_text("#run-status") == "queued"  # its seed 0 trains on the only worker
    assert run_page.inner_text("#environment-empty") == \
        "Recorded when a worker starts training the run: it shows here then."
    run_page.wait_for_selector('#run-environment [data-field="torch"]', timeout=180_000)
    assert run_page.inner_text("#run-status") in ("running", "succeeded")
    assert run_page.inner_text('#run-environment [data-field="seed"]') == "1"
    assert "--seed 1 " in run_page.inner_text("#repeat-command")

    experiment_page.bring_to_front()
    experiment_page.wait_for_function(f"{statuses}.join() === 'succeeded,succeeded'", timeout=180_000)
    assert experiment_page.evaluate("Array.from(document.querySelectorAll('#run-table tbody progress'))"
                                    ".map((bar) => bar.value)") == [20_000, 20_000]
    assert experiment_page.evaluate("window.notReloaded") is True
    run_list.bring_to_front()
    ended = ("(ids) => ids.every((id) => document.querySelector(`#run-list-table tr[data-run-id='${id}'] .status`)"
             ".textContent === 'succeeded')")
    run_list.wait_for_function(ended, arg=[first, second], timeout=30_000)
    assert run_list.is_checked(f'input[name="runs"][value="{first}"]')
    assert not run_list.is_checked(f'input[name="runs"][value="{second}"]')
    assert run_list.evaluate("window.notReloaded") is True
    assert not errors
    context.close()
