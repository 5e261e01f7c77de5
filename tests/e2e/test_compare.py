"""Comparing runs in a real browser: pick runs in the run list (made-up finished runs, stored directly in the
site's database, plus one real run that a worker trains meanwhile), open the comparison, follow the live
run, group by experiment, change the band, smoothing and scale, set a threshold, read the hyperparameter
diff, export CSV, and take screenshots at desktop and phone widths (docs/screenshots/compare*.png).

The real stack runs as subprocesses (`python -m rlweb.devserver`, tests/e2e/stack.py). What is costly is made
once per module (the seeded runs, the real run, a signed-in browser context); each test opens its own page on
the comparison with the options it needs in the URL (the page keeps them there), so each runs alone too.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.stack import REPO, SCREENSHOTS, charts_fit, painted

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

USERNAME, PASSWORD = "comparer", "a long compare password 5"
# short: the last tests wait until it has trained to its end (two videos, at 1500 and 3000 steps)
REAL_RUN = {"name": "real DQN", "total_steps": "3000", "eval_interval": "1500", "eval_episodes": "2",
            "checkpoint_interval": "0", "video_interval": "1500", "hp_learning_starts": "500", "hp_buffer_size": "5000", "hp_batch_size": "32",
            "hp_train_frequency": "4", "hp_target_update_interval": "250", "hp_hidden_layers": "32,32"}
# null-safe: it is also evaluated while a click navigates away and the next page has no #compare-page yet
READY = "document.getElementById('compare-page')?.dataset.ready === '1'"
RETURN_CHART_SELECTOR = "#chart-rollout-episode-return"
RETURN_CHART = "document.getElementById('chart-rollout-episode-return')"
SEED_SCRIPT = """
import sys
from pathlib import Path
from benchmarks.dashboard import use_site_database
use_site_database(Path(sys.argv[1]))
from benchmarks.compare import seed_demo
print(",".join(map(str, seed_demo(sys.argv[2], sys.argv[3]))))
"""


@pytest.fixture(scope="module")
def demo_site(site_stack):
    """The rlweb with the demo user and their finished runs: (base URL, the demo run ids)."""
    seeded = subprocess.run([sys.executable, "-c", SEED_SCRIPT, str(site_stack.var), USERNAME, PASSWORD], cwd=REPO,
                            env=site_stack.env, capture_output=True, text=True, timeout=300, check=True)
    return site_stack.url, [int(run_id) for run_id in seeded.stdout.strip().splitlines()[-1].split(",")]


# the options the page had once grouped, banded and smoothed (as the one long scenario left them)
GROUPED = "group=experiment&band=minmax&smooth=0.9"


def watch(page, base: str) -> tuple[list[str], list[str]]:
    """Collect the page's script errors and any request that leaves the site."""
    errors, external = [], []
    page.set_default_timeout(60_000)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: external.append(request.url)
            if request.url.startswith(("http:", "https:")) and not request.url.startswith(base) else None)
    return errors, external


def quiet(errors: list[str], external: list[str]) -> None:
    assert not errors, errors
    assert not external, f"the page reached outside the site: {external[:3]}"


@pytest.fixture(scope="module")
def signed_in(demo_site, browser):
    """A browser context signed in as the demo user (made once; each test opens its own page in it)."""
    base, _ = demo_site
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    seen = watch(page, base)
    page.goto(f"{base}/login/")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    page.close()
    quiet(*seen)
    yield context
    context.close()


@pytest.fixture(scope="module")
def real_run(demo_site, signed_in):
    """One real run, launched through the form and trained by the worker while the tests compare:
    (its id, its experiment's page)."""
    base, _ = demo_site
    page = signed_in.new_page()
    seen = watch(page, base)
    page.goto(f"{base}/experiments/new/")
    for name, value in REAL_RUN.items():
        page.fill(f"#id_{name}", value)
    page.select_option("#id_device", "cpu")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    launched = int(page.get_attribute("#run-table a[data-run-id]", "data-run-id")), page.url
    page.close()
    quiet(*seen)
    return launched


@pytest.fixture(scope="module")
def picked(demo_site, real_run) -> tuple[list[int], list[int]]:
    """The runs the tests compare, as picked in the run list: (the real run and the DQN and PPO seeds,
    the seeds alone), newest first as the run list orders them."""
    _, demo_runs = demo_site
    others = [*demo_runs[-2:][::-1], *demo_runs[:3][::-1]]
    return [real_run[0], *others], others


def real_trace(run_id: int) -> str:
    """The real run's curve in the return chart, while the runs are not grouped."""
    return f"{RETURN_CHART}.data.find((t) => t.name && t.name.startsWith('#{run_id} '))"


@pytest.fixture(scope="module")
def real_curve(demo_site, signed_in, real_run, picked) -> None:
    """Wait (once) until the real run has points to compare, as the tests after the live curve's expect."""
    page = signed_in.new_page()
    seen = watch(page, demo_site[0])
    open_comparison(page, demo_site[0], picked)
    page.wait_for_function(f"{real_trace(real_run[0])} && {real_trace(real_run[0])}.x.length > 0", timeout=180_000)
    page.close()
    quiet(*seen)


@pytest.fixture
def page(demo_site, signed_in):
    """A fresh page in the signed-in context; it must end with no script error and no request off the site."""
    page = signed_in.new_page()
    seen = watch(page, demo_site[0])
    yield page
    page.close()
    quiet(*seen)


def open_comparison(page, base: str, picked: tuple[list[int], list[int]], options: str = "") -> None:
    """Open the comparison of the picked runs (with `options`, a query string) and wait until it is drawn."""
    runs = ",".join(map(str, sorted(picked[0], reverse=True)))
    page.goto(f"{base}/compare/?runs={runs}" + (f"&{options}" if options else ""))
    page.wait_for_function(READY)


def legend(page) -> list[str]:
    return page.eval_on_selector_all("#compare-legend button", "buttons => buttons.map((b) => b.textContent)")


def visible_settings(page) -> list[str]:
    return page.eval_on_selector_all("#hp-table tbody tr", "rows => rows.filter((r) => r.offsetParent)"
                                                           ".map((r) => r.querySelector('code').textContent)")


def set_smoothing(page, value: float) -> None:
    page.eval_on_selector("#smoothing", "(input, value) => { input.value = value; "
                                        "input.dispatchEvent(new Event('input')); }", value)


def test_compare_with_on_a_run_page_opens_a_comparison_that_offers_other_runs_to_add(page, demo_site, real_run):
    base, demo_runs = demo_site
    run_id, experiment_url = real_run
    page.goto(experiment_url)
    page.click("#run-table a[data-run-id]")
    page.click("#compare-with")
    page.wait_for_function(READY)
    page.check(f"#add-runs-form input[value='{demo_runs[0]}']")
    page.click("#add-runs-form button[type=submit]")
    page.wait_for_url(f"{base}/compare/?runs={run_id},{demo_runs[0]}")  # the page it left was ready too
    page.wait_for_function(READY)


def test_runs_picked_in_the_run_list_open_in_one_comparison(page, demo_site, real_run, picked):
    base, _ = demo_site
    page.goto(f"{base}/runs/")
    for run_id in picked[0]:
        page.check(f"input[name=runs][value='{run_id}']")
    page.click("text=Compare selected")
    page.wait_for_url(f"{base}/compare/?runs={','.join(map(str, sorted(picked[0], reverse=True)))}")
    page.wait_for_function(READY)
    assert len(legend(page)) == 6 and any(label.startswith(f"#{real_run[0]} real DQN") for label in legend(page))
    assert page.eval_on_selector_all(".chart-card", "cards => cards.map((c) => c.dataset.metric)")[:2] == [
        "rollout/episode_return", "eval/return_mean"]


def test_a_live_runs_curve_appears_and_grows_without_a_reload(page, demo_site, real_run, picked):
    run_id = real_run[0]
    open_comparison(page, demo_site[0], picked)
    trace = real_trace(run_id)
    page.wait_for_function(f"{trace} && {trace}.x.length > 0", timeout=180_000)
    first = page.evaluate(f"{trace}.x.length")
    page.wait_for_function(f"{trace}.x.length > {first} || "
                           f"document.querySelector('#summary-table tr[data-run=\"{run_id}\"] .status')"
                           ".textContent === 'succeeded'", timeout=180_000)


def test_grouping_by_experiment_draws_a_mean_and_a_band_per_experiment_with_its_seed_count(page, demo_site, picked,
                                                                                        real_curve):
    open_comparison(page, demo_site[0], picked)
    page.select_option("#group", "experiment")
    page.wait_for_function("[...document.querySelectorAll('#compare-legend button')].some("
                           "(b) => b.textContent.includes('(n=3)'))")
    labels = legend(page)
    assert len(labels) == 3 and any(label.startswith("DQN lr 1e-3") and label.endswith("(n=3)") for label in labels)
    assert any(label.startswith("PPO baseline") and label.endswith("(n=2)") for label in labels)
    fills = page.evaluate(f"{RETURN_CHART}.data.filter((t) => t.fill === 'tonexty').length")
    assert fills == 3


def test_grouped_runs_show_a_band_that_follows_the_chosen_statistic(page, demo_site, picked, real_curve):
    open_comparison(page, demo_site[0], picked, "group=experiment")
    # the band: standard deviation, then min to max
    # summed over every group: each band is a lower trace, then its upper one filled to it
    summed_width = f"""{RETURN_CHART}.data.reduce((sum, trace, i, data) => trace.fill !== 'tonexty' ? sum
        : sum + trace.y.reduce((width, value, j) => width + value - data[i - 1].y[j], 0), 0)"""

    def band_width():
        return page.evaluate(summed_width)
    set_smoothing(page, 0)
    std_width = band_width()
    page.select_option("#band", "minmax")
    page.wait_for_function("new URLSearchParams(location.search).get('band') === 'minmax'")
    page.wait_for_function(f"{RETURN_CHART}.data.some((t) => t.fill === 'tonexty')")
    page.wait_for_function(f"Math.abs(({summed_width}) - {std_width!r}) > 1e-6 * Math.abs({std_width!r})")  # redrawn
    assert band_width() > 0 and band_width() != pytest.approx(std_width)


def test_smoothing_and_log_scale_change_the_charts_and_stay_in_the_url_across_a_reload(page, demo_site, picked,
                                                                                       real_curve):
    open_comparison(page, demo_site[0], picked, "group=experiment&band=minmax")
    set_smoothing(page, 0)
    dqn_mean = f"{RETURN_CHART}.data.find((t) => t.name && t.name.startsWith('DQN lr 1e-3')).y"
    raw = page.evaluate(dqn_mean)
    set_smoothing(page, 0.9)
    smoothed = page.evaluate(dqn_mean)
    assert smoothed[0] == pytest.approx(raw[0]) and smoothed[-1] != pytest.approx(raw[-1])
    page.check("#log-scale")
    assert page.evaluate(f"{RETURN_CHART}.layout.yaxis.type") == "log"
    page.reload()
    page.wait_for_function(READY)
    assert page.input_value("#group") == "experiment" and page.input_value("#band") == "minmax"
    assert page.input_value("#smoothing") == "0.9" and page.is_checked("#log-scale")
    page.uncheck("#log-scale")


def test_a_threshold_shows_the_steps_each_run_needed_to_reach_it(page, demo_site, picked, real_curve):
    base, demo_runs = demo_site
    open_comparison(page, base, picked, GROUPED)
    # the summary: steps each run needed to reach an eval return of 300
    page.fill("#threshold", "300")
    cell = f"#summary-table tr[data-run='{demo_runs[0]}'] td:nth-child(5)"
    page.wait_for_function(f"document.querySelector(\"{cell}\").textContent !== '–'")
    assert page.inner_text(cell).replace(",", "").isdigit() or page.inner_text(cell) == "not reached"
    assert "threshold=300" in page.url


def test_the_shared_legend_hides_a_group_in_every_chart_and_shows_it_again(page, demo_site, picked, real_curve):
    open_comparison(page, demo_site[0], picked, GROUPED + "&threshold=300")
    names = f"{RETURN_CHART}.data.map((trace) => trace.name || '')"
    page.click("#compare-legend button:has-text('PPO baseline')")
    assert not any(name.startswith("PPO") for name in page.evaluate(names))
    assert page.get_attribute("#compare-legend button:has-text('PPO baseline')", "aria-pressed") == "false"
    page.click("#compare-legend button:has-text('PPO baseline')")
    assert any(name.startswith("PPO") for name in page.evaluate(names))


def test_the_settings_diff_shows_what_differs_and_show_all_shows_the_rest(page, demo_site, picked, real_curve):
    open_comparison(page, demo_site[0], picked, GROUPED + "&threshold=300")
    differing = visible_settings(page)
    assert {"algorithm", "seed", "learning_rate"} <= set(differing) and "gamma" not in differing
    page.check("#show-all-settings")
    assert "gamma" in visible_settings(page)


def test_csv_export_holds_every_value_of_the_compared_runs(page, demo_site, picked, real_curve, tmp_path):
    open_comparison(page, demo_site[0], picked, GROUPED + "&threshold=300")
    with page.expect_download() as download:
        page.click("#export-csv")
    path = tmp_path / "compare.csv"
    download.value.save_as(path)
    with path.open() as file:
        rows = list(csv.DictReader(file))
    assert {int(row["run"]) for row in rows} == set(picked[0])
    assert {row["key"] for row in rows} >= {"rollout/episode_return", "eval/return_mean", "train/loss"}


def test_a_chart_downloads_as_svg_with_the_legend_shown_above_the_charts(page, demo_site, picked, real_curve):
    open_comparison(page, demo_site[0], picked, GROUPED + "&threshold=300")
    page.hover(RETURN_CHART_SELECTOR)
    with page.expect_download() as download:
        page.click(f"{RETURN_CHART_SELECTOR} [data-title='Download SVG with legend']")
    assert download.value.suggested_filename == "compare-rollout-episode-return.svg"
    svg = Path(download.value.path()).read_text()
    assert svg.startswith("<svg") and "DQN lr 1e-3" in svg


def wait_until_the_real_run_ends(page, run_id: int) -> None:
    """The page, still polling, says the real run succeeded and no run is live any more."""
    page.wait_for_function(f"document.querySelector('#summary-table tr[data-run=\"{run_id}\"] .status')"
                           ".textContent === 'succeeded'", timeout=300_000)
    page.wait_for_function("document.getElementById('live-indicator').hidden")


def test_when_the_live_run_ends_the_page_says_so_and_shows_the_video_it_recorded(page, demo_site, real_run, picked):
    open_comparison(page, demo_site[0], picked, GROUPED + "&threshold=300")
    wait_until_the_real_run_ends(page, real_run[0])
    page.wait_for_selector("#video-grid video")
    assert page.is_hidden("#video-empty")
    assert page.get_attribute("#video-grid video", "src").startswith("/videos/")
    assert page.eval_on_selector("#video-grid video", "video => new Promise((resolve) => { "
                                 "video.onloadedmetadata = () => resolve(video.duration); video.load(); })") > 0
    assert page.locator("#video-grid figure").count() == 1
    assert page.inner_text("#video-missing") == f"No video from {', '.join(f'#{run}' for run in picked[1])}."
    # the real run's system metrics (trainer/system_metrics.py) in their own folded group, after the other charts
    assert page.inner_text("#compare-system-group > summary").startswith("System")
    assert page.locator('#compare-system-group [data-metric="system/rss_mb"]').count() == 1


def test_screenshots_of_the_comparison_at_desktop_and_phone_widths(page, demo_site, real_run, picked):
    open_comparison(page, demo_site[0], picked, GROUPED + "&threshold=300")
    wait_until_the_real_run_ends(page, real_run[0])  # the picture shows the finished run and its video
    page.wait_for_selector("#video-grid video")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.mouse.move(0, 0)  # no chart toolbar in the picture (it fades out)
    page.wait_for_function(  # (plotly fades the toolbar's buttons out, not the bar)
        "[...document.querySelectorAll('.modebar-group')].every((group) => getComputedStyle(group).opacity === '0')")
    page.screenshot(path=str(SCREENSHOTS / "compare.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    charts_fit(page)  # plotly resizes to the narrow page
    page.screenshot(path=str(SCREENSHOTS / "compare-narrow.png"), full_page=True)


STATISTICS_READY = "document.getElementById('statistics')?.dataset.ready === '1'"


PONG_RUN = f"""
from django.contrib.auth import get_user_model
from rlweb.experiments import history
from rlweb.experiments.models import Event, Experiment, Run
owner = get_user_model().objects.get(username={USERNAME!r})
experiment = Experiment.objects.create(owner=owner, name="pong dqn", algorithm="dqn", env_id="ALE/Pong-v5",
                                       hyperparameters={{}}, total_steps=6_000_000, device="cpu")
run = Run.objects.create(experiment=experiment, seed=0, total_steps=6_000_000, status="succeeded",
                         steps_done=6_000_000, eval_return_mean=12.0)
events = Event.objects.bulk_create(
    Event(run=run, seq=index + 1, kind="episode", step=step, time=step / 1000,
          values={{"rollout/episode_return": min(21.0, -21 + 40 * step / 6e6)}})
    for index, step in enumerate(range(0, 6_000_001, 100_000)))
history.summarize(run.pk, events)
result = run.pk
"""


def test_statistics_across_tasks_show_rliables_aggregates_per_algorithm_and_rl_zoos_band(page, demo_site, site_stack):
    """The finished demo runs (DQN and PPO seeds on CartPole): the bootstrap runs off the request, the page asks
    until it is there, then shows a row per algorithm, P(dqn > ppo), the profiles and the published band."""
    base, demo_runs = demo_site
    page.goto(f"{base}/compare/?runs={','.join(map(str, demo_runs))}")
    page.wait_for_function(STATISTICS_READY, timeout=120_000)
    groups = page.eval_on_selector_all("#statistics-table tbody tr", "rows => rows.map((row) => row.dataset.group)")
    assert groups == ["dqn", "ppo"]
    iqm = page.inner_text("#statistics-table tbody tr[data-group=ppo] td:nth-child(3)")
    assert iqm.count("[") == 1 and iqm.endswith("]")  # a point and its interval
    assert page.inner_text("#statistics-improvement").startswith("P(dqn > ppo) = ")
    assert "RL Zoo DQN: 500 ± 0" in page.inner_text("#published-baselines")
    page.wait_for_function(READY)
    assert page.evaluate(f"{RETURN_CHART}.layout.shapes.length") == 2  # the two published bands
    page.select_option("#statistics-options select[name=count]", "best")  # asks again: computed, then shown
    page.wait_for_function(STATISTICS_READY)
    assert "count=best" in page.url and "improve=dqn" in page.url and "runs=" in page.url  # a link to share
    page.goto(page.url.replace("improve=dqn&over=ppo", "improve=ppo&over=dqn"))  # the shared link, pair swapped
    page.wait_for_function(STATISTICS_READY)
    assert page.input_value("#statistics-options select[name=count]") == "best"
    assert page.inner_text("#statistics-improvement").startswith("P(ppo > dqn) = ")
    assert page.evaluate("document.getElementById('statistics-efficiency').data.length") == 6  # 2 groups x band
    page.locator("#statistics").scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#statistics").screenshot(path=str(SCREENSHOTS / "compare-statistics.png"))
    page.goto(f"{base}/runs/{demo_runs[0]}/")  # a run's page: where it stands, and the band on its return chart
    assert "; RL Zoo DQN: 500 ± 0" in page.inner_text("#run-standing-text")
    chart = ".chart-card[data-metric='eval/return_mean'] .chart"
    page.wait_for_function(f"document.querySelector(\"{chart}\")?.layout?.shapes?.length === 1")
    page.locator(".chart-card[data-metric='eval/return_mean']").screenshot(path=str(SCREENSHOTS / "run-baseline.png"))
    pong = site_stack.orm(PONG_RUN)
    page.goto(f"{base}/compare/?runs={pong}")  # the compare page draws it too
    page.wait_for_function(READY)
    assert page.evaluate(f"{RETURN_CHART}.data.some((trace) => trace.name?.startsWith('Dopamine dqn (ALE/Pong-v5'))")
    page.locator(".chart-card[data-metric='rollout/episode_return']").screenshot(
        path=str(SCREENSHOTS / "compare-baseline-curve.png"))
    page.goto(f"{base}/runs/{pong}/")  # Dopamine's curve, its iterations in agent steps
    returns = ".chart-card[data-metric='rollout/episode_return'] .chart"
    page.wait_for_function(f"document.querySelector(\"{returns}\")?.data?.some((trace) => "
                           "trace.name?.startsWith('Dopamine dqn (ALE/Pong-v5') && trace.x[1] === 2500000)")
    page.locator(".chart-card[data-metric='rollout/episode_return']").screenshot(
        path=str(SCREENSHOTS / "run-baseline-curve.png"))
