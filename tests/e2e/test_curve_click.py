"""Clicking a point of a curve on the run page, in a real browser against the real stack: the episode video
recorded nearest to that step scrolls into view and plays, and the checkpoint nearest to it is highlighted.
Screenshot: docs/screenshots/run-curve-click.png."""

from __future__ import annotations

import re

import pytest

from tests.e2e.stack import SCREENSHOTS, launch_experiment, sign_up

pytestmark = [pytest.mark.e2e, pytest.mark.shared_site]  # tests/e2e/stack.py: site_stack

USERNAME, PASSWORD = "clicker", "a long browser password 16"
TRAINING = {"total_steps": "3000", "eval_interval": "1000", "eval_episodes": "2", "checkpoint_interval": "1000",
            "video_interval": "1000", "hp_learning_starts": "300", "hp_buffer_size": "5000", "hp_batch_size": "32",
            "hp_hidden_layers": "32,32"}
RETURNS = '[data-metric="rollout/episode_return"] .chart'


def nearest(step: int, steps: list[int]) -> int:
    return min(steps, key=lambda candidate: abs(candidate - step))


def test_clicking_a_point_plays_the_nearest_video_and_highlights_the_nearest_checkpoint(site, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(60_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_up(page, site, USERNAME, PASSWORD)
    launch_experiment(page, site, "Click a curve", TRAINING)
    page.wait_for_function("document.getElementById('run-status').textContent.trim() === 'succeeded'",
                           timeout=240_000)
    page.reload()  # the stored history, with every video and checkpoint
    page.wait_for_function("document.getElementById('run-page').dataset.ready === '1'")
    video_steps = [int(step) for step in page.eval_on_selector_all("#video-list figure", "(all) => all.map((f) => f.dataset.step)")]
    checkpoint_steps = [int(step) for step in page.eval_on_selector_all(
        "#checkpoint-list li", "(all) => all.map((item) => item.dataset.step)")]
    assert len(video_steps) >= 3 and len(checkpoint_steps) >= 3

    # click the returns chart at step 1,000: plotly picks the episode nearest to it
    chart = page.locator(RETURNS)
    chart.scroll_into_view_if_needed()
    page.wait_for_selector(f"{RETURNS} .scatterlayer")
    box = chart.bounding_box()
    x = page.evaluate(f"(c => c._fullLayout._size.l + c._fullLayout.xaxis.d2p(1000))(document.querySelector('{RETURNS}'))")
    page.mouse.move(box["x"] + x, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + x, box["y"] + box["height"] / 2)
    page.wait_for_function("document.querySelector('#video-list figure.is-nearest') !== null")
    note = page.text_content("#nearest-note")
    clicked = int(re.match(r"Step (\d+):", note).group(1))
    assert abs(clicked - 1000) < 300, note

    figure = page.locator("#video-list figure.is-nearest")
    assert int(figure.get_attribute("data-step")) == nearest(clicked, video_steps)
    # it plays (an early episode lasts a fraction of a second, so it may have ended by now)
    page.wait_for_function("document.querySelector('#video-list figure.is-nearest video').played.length > 0",
                           timeout=30_000)
    assert page.evaluate("[...document.querySelectorAll('#video-list video')].filter((v) => v.played.length > 0)"
                         ".length") == 1  # that one only
    page.wait_for_function("(box => box.top >= 0 && box.bottom <= window.innerHeight)"
                           "(document.querySelector('#video-list figure.is-nearest').getBoundingClientRect())")
    (highlighted,) = page.eval_on_selector_all("#checkpoint-list li.is-nearest", "(all) => all.map((i) => i.dataset.step)")
    assert int(highlighted) == nearest(clicked, checkpoint_steps)
    assert page.evaluate("""() => {  // a long list scrolls within itself: the highlighted one is in its view
        const list = document.getElementById('checkpoint-list').getBoundingClientRect();
        const item = document.querySelector('#checkpoint-list li.is-nearest').getBoundingClientRect();
        return item.top >= list.top && item.bottom <= list.bottom;
    }""")
    assert f"step {highlighted}" in note
    # from the charts to the checkpoints: the clicked curve, the video playing and the checkpoint highlighted
    top, bottom = page.evaluate("[document.getElementById('charts').getBoundingClientRect().top + scrollY - 8,"
                                " document.getElementById('checkpoint-list').getBoundingClientRect().bottom + scrollY + 16]")
    page.screenshot(path=str(SCREENSHOTS / "run-curve-click.png"), full_page=True,
                    clip={"x": 0, "y": top, "width": 1280, "height": bottom - top})
    assert not errors
