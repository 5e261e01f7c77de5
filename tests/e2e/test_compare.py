"""Comparing runs in a real browser: pick runs in the run list (made-up finished runs, stored directly in the
site's database, plus one real run that a worker trains meanwhile), open the comparison, follow the live
run, group by experiment, change the band, smoothing and scale, set a threshold, read the hyperparameter
diff, export CSV, and take screenshots at desktop and phone widths (docs/screenshots/compare*.png).

The real stack runs as subprocesses (`python -m rlweb.devserver`, tests/e2e/stack.py).
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.stack import REPO, SCREENSHOTS, charts_fit, painted

pytestmark = pytest.mark.e2e

USERNAME, PASSWORD = "grace", "a long compare password 5"
REAL_RUN = {"name": "real DQN", "total_steps": "6000", "eval_interval": "2000", "eval_episodes": "2",
            "checkpoint_interval": "0", "video_interval": "3000", "hp_learning_starts": "500", "hp_buffer_size": "5000", "hp_batch_size": "32",
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
    """The fresh rlweb with the demo user and their finished runs: (base URL, the demo run ids)."""
    seeded = subprocess.run([sys.executable, "-c", SEED_SCRIPT, str(site_stack.var), USERNAME, PASSWORD], cwd=REPO,
                            env=site_stack.env, capture_output=True, text=True, timeout=300, check=True)
    return site_stack.url, [int(run_id) for run_id in seeded.stdout.strip().splitlines()[-1].split(",")]


def legend(page) -> list[str]:
    return page.eval_on_selector_all("#compare-legend button", "buttons => buttons.map((b) => b.textContent)")


def visible_settings(page) -> list[str]:
    return page.eval_on_selector_all("#hp-table tbody tr", "rows => rows.filter((r) => r.offsetParent)"
                                                           ".map((r) => r.querySelector('code').textContent)")


def set_smoothing(page, value: float) -> None:
    page.eval_on_selector("#smoothing", "(input, value) => { input.value = value; "
                                        "input.dispatchEvent(new Event('input')); }", value)


def test_a_user_compares_runs_from_the_run_list_groups_them_and_exports_csv(demo_site, browser, tmp_path):
    base, demo_runs = demo_site
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors, external = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: external.append(request.url)
            if request.url.startswith(("http:", "https:")) and not request.url.startswith(base) else None)
    page.goto(f"{base}/login/")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")

    # one real run, trained by the worker while we compare
    page.goto(f"{base}/experiments/new/")
    for name, value in REAL_RUN.items():
        page.fill(f"#id_{name}", value)
    page.select_option("#id_device", "cpu")
    page.click("text=Create and launch")
    page.wait_for_selector("#run-table")
    real_run = int(page.get_attribute("#run-table a[data-run-id]", "data-run-id"))

    # "Compare with…" on its run page: a comparison of this run that offers the others to add
    page.click("#run-table a[data-run-id]")
    page.click("#compare-with")
    page.wait_for_function(READY)
    page.check(f"#add-runs-form input[value='{demo_runs[0]}']")
    page.click("#add-runs-form button[type=submit]")
    page.wait_for_url(f"{base}/compare/?runs={real_run},{demo_runs[0]}")  # the page it left was ready too
    page.wait_for_function(READY)

    # pick it and the DQN and PPO seeds in the run list
    others = [*demo_runs[-2:][::-1], *demo_runs[:3][::-1]]  # as the run list orders them: newest first
    picked = [real_run, *others]
    page.goto(f"{base}/runs/")
    for run_id in picked:
        page.check(f"input[name=runs][value='{run_id}']")
    page.click("text=Compare selected")
    page.wait_for_url(f"{base}/compare/?runs={','.join(map(str, sorted(picked, reverse=True)))}")
    page.wait_for_function(READY)
    assert len(legend(page)) == 6 and any(label.startswith(f"#{real_run} real DQN") for label in legend(page))
    assert page.eval_on_selector_all(".chart-card", "cards => cards.map((c) => c.dataset.metric)")[:2] == [
        "rollout/episode_return", "eval/return_mean"]

    # the real run's curve appears and grows without a reload
    real_trace = f"{RETURN_CHART}.data.find((t) => t.name && t.name.startsWith('#{real_run} '))"
    page.wait_for_function(f"{real_trace} && {real_trace}.x.length > 0", timeout=180_000)
    first = page.evaluate(f"{real_trace}.x.length")
    page.wait_for_function(f"{real_trace}.x.length > {first} || "
                           f"document.querySelector('#summary-table tr[data-run=\"{real_run}\"] .status')"
                           ".textContent === 'succeeded'", timeout=180_000)

    # group by experiment: a mean and a band per experiment, the number of seeds in the legend
    page.select_option("#group", "experiment")
    page.wait_for_function("[...document.querySelectorAll('#compare-legend button')].some("
                           "(b) => b.textContent.includes('(n=3)'))")
    labels = legend(page)
    assert len(labels) == 3 and any(label.startswith("DQN lr 1e-3") and label.endswith("(n=3)") for label in labels)
    assert any(label.startswith("PPO baseline") and label.endswith("(n=2)") for label in labels)
    fills = page.evaluate(f"{RETURN_CHART}.data.filter((t) => t.fill === 'tonexty').length")
    assert fills == 3

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

    # smoothing changes the drawn means, the log scale the axis; both stay in the URL across a reload
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

    # the summary: steps each run needed to reach an eval return of 300
    page.fill("#threshold", "300")
    cell = f"#summary-table tr[data-run='{demo_runs[0]}'] td:nth-child(5)"
    page.wait_for_function(f"document.querySelector(\"{cell}\").textContent !== '–'")
    assert page.inner_text(cell).replace(",", "").isdigit() or page.inner_text(cell) == "not reached"
    assert "threshold=300" in page.url

    # the shared legend hides a group in every chart, and shows it again
    names = f"{RETURN_CHART}.data.map((trace) => trace.name || '')"
    page.click("#compare-legend button:has-text('PPO baseline')")
    assert not any(name.startswith("PPO") for name in page.evaluate(names))
    assert page.get_attribute("#compare-legend button:has-text('PPO baseline')", "aria-pressed") == "false"
    page.click("#compare-legend button:has-text('PPO baseline')")
    assert any(name.startswith("PPO") for name in page.evaluate(names))

    # the hyperparameter diff shows what differs; "show all" shows the rest
    differing = visible_settings(page)
    assert {"algorithm", "seed", "learning_rate"} <= set(differing) and "gamma" not in differing
    page.check("#show-all-settings")
    assert "gamma" in visible_settings(page)

    # CSV export of every value of the compared runs
    with page.expect_download() as download:
        page.click("#export-csv")
    path = tmp_path / "compare.csv"
    download.value.save_as(path)
    with path.open() as file:
        rows = list(csv.DictReader(file))
    assert {int(row["run"]) for row in rows} == set(picked)
    assert {row["key"] for row in rows} >= {"rollout/episode_return", "eval/return_mean", "train/loss"}

    # a chart as SVG, with the legend the page shows once above the charts
    page.hover(RETURN_CHART_SELECTOR)
    with page.expect_download() as download:
        page.click(f"{RETURN_CHART_SELECTOR} [data-title='Download SVG with legend']")
    assert download.value.suggested_filename == "compare-rollout-episode-return.svg"
    svg = Path(download.value.path()).read_text()
    assert svg.startswith("<svg") and "DQN lr 1e-3" in svg

    # the real run ends; the page, still polling, says so, and shows the video it recorded
    page.wait_for_function(f"document.querySelector('#summary-table tr[data-run=\"{real_run}\"] .status')"
                           ".textContent === 'succeeded'", timeout=300_000)
    page.wait_for_function("document.getElementById('live-indicator').hidden")
    page.wait_for_selector("#video-grid video")
    assert page.is_hidden("#video-empty")
    assert page.get_attribute("#video-grid video", "src").startswith("/videos/")
    assert page.eval_on_selector("#video-grid video", "video => new Promise((resolve) => { "
                                 "video.onloadedmetadata = () => resolve(video.duration); video.load(); })") > 0
    assert page.locator("#video-grid figure").count() == 1
    assert page.inner_text("#video-missing") == f"No video from {', '.join(f'#{run}' for run in others)}."

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.uncheck("#show-all-settings")
    page.mouse.move(0, 0)  # no chart toolbar in the picture (it fades out)
    page.wait_for_function(  # (plotly fades the toolbar's buttons out, not the bar)
        "[...document.querySelectorAll('.modebar-group')].every((group) => getComputedStyle(group).opacity === '0')")
    page.screenshot(path=str(SCREENSHOTS / "compare.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    charts_fit(page)  # plotly resizes to the narrow page
    page.screenshot(path=str(SCREENSHOTS / "compare-narrow.png"), full_page=True)

    assert not errors, errors
    assert not external, f"the page reached outside the site: {external[:3]}"
    context.close()
