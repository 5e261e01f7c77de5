"""Static files: our pages' CSS and JS, and plotly.js's cartesian bundle from our own static files (no CDN): the
plotly.js of the installed plotly package, with only the 2-D trace types, kept by browsers for good."""

import re
from pathlib import Path

import plotly
import pytest
from django.conf import settings
from django.contrib.staticfiles import finders

PAGES = ["experiments/run_detail.html", "experiments/compare.html"]


def plotly_script() -> str:
    """The plotly.js path the chart pages load, the same on every one of them."""
    paths = {re.search(r"\{% static '(vendor/plotly/[^']+)' %\}", (settings.BASE_DIR / "templates" / page).read_text())
             .group(1) for page in PAGES}
    assert len(paths) == 1, paths
    return paths.pop()


def version_in(header: str) -> str:
    return re.search(r"plotly\.js(?: \([a-z -]+\))? v(\d+\.\d+\.\d+)", header).group(1)


def test_the_pages_load_the_cartesian_bundle_of_the_installed_plotly_packages_plotly_js():
    found = Path(finders.find(plotly_script()))
    head = found.read_text()[:300]
    assert "plotly.js (cartesian - minified)" in head
    package_head = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()[:300]
    assert version_in(head) == version_in(package_head)  # `make vendor-plotly` after an upgrade of plotly
    assert found.name == f"plotly-cartesian-{version_in(head)}.min.js"  # a new version is a new URL
    assert found.stat().st_size < 0.4 * (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").stat().st_size


def test_the_bundle_has_every_trace_type_our_pages_draw():
    bundle = Path(finders.find(plotly_script())).read_text()
    drawn = set()
    for script in (settings.BASE_DIR / "static" / "experiments").glob("*.js"):
        # a trace's type, not a button's, a shape's or an axis's
        drawn |= set(re.findall(r'\btype: "(\w+)"', script.read_text())) - {"button", "line", "rect", "linear", "log"}
    assert drawn >= {"scatter", "heatmap"}
    for trace in drawn:
        assert f'moduleType:"trace",name:"{trace}"' in bundle, trace


@pytest.mark.parametrize("path", ["experiments/site.css", "experiments/run_detail.css", "experiments/run_detail.js",
                                  "experiments/experiment_form.js"])
def test_static_files_are_served_without_collectstatic(owner_client, path):
    response = owner_client.get(f"/static/{path}")
    assert response.status_code == 200
    assert response["Cache-Control"] == "max-age=60, public"  # ours change without a new name: asked again soon


def test_plotly_is_served_to_be_kept_for_good(client):
    response = client.get(f"/static/{plotly_script()}")
    assert response.status_code == 200
    assert response["Cache-Control"] == "max-age=315360000, public, immutable"
    assert b"plotly.js (cartesian" in b"".join(response.streaming_content)[:300]


def test_static_files_do_not_need_a_login(client):
    assert client.get("/static/experiments/site.css").status_code == 200


def test_every_page_names_its_icon_which_is_served_so_browsers_do_not_ask_for_a_missing_favicon_ico(client):
    html = client.get("/login/").content.decode()
    icon = re.search(r'<link rel="icon" href="([^"]+)" type="image/svg\+xml">', html)
    assert icon, html[:500]
    response = client.get(icon.group(1))
    assert response.status_code == 200 and b"<svg" in b"".join(response.streaming_content)
