"""Plotly figures saved as PNG for docs/: drawn by plotly.js (from the plotly package) in Chromium."""

from __future__ import annotations

import tempfile
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def save_png(figure, path: Path, width: int, height: int) -> None:
    """Write `figure` (its layout's width and height) as a PNG of the plot, no page margins."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="rlweb-figure-") as folder:
        page_path = Path(folder) / "figure.html"
        figure.write_html(page_path, include_plotlyjs=True, full_html=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            tab = browser.new_page(viewport={"width": width + 20, "height": height + 20})
            tab.goto(page_path.as_uri())
            tab.wait_for_selector(".plot-container")
            path.parent.mkdir(parents=True, exist_ok=True)
            tab.locator(".plot-container").screenshot(path=str(path))
            browser.close()
