"""Static files: our pages' CSS and JS (native ES modules, no build step), and plotly.js's cartesian bundle from our
own static files (no CDN): the plotly.js of the installed plotly package, with only the 2-D trace types, kept by
browsers for good, loaded by every page that draws charts through one include (templates/_plotly.html)."""

import re
from pathlib import Path

import plotly
import pytest
from django.conf import settings
from django.contrib.staticfiles import finders

TEMPLATES = settings.BASE_DIR / "templates"
STATIC = settings.BASE_DIR / "static"
PLOTLY_INCLUDE = "_plotly.html"
CHART_PAGES = {"experiments/run_detail.html", "experiments/compare.html", "sweeps/sweep_detail.html",
               "suites/suite_detail.html", "sweeps/pbt_detail.html"}


def plotly_script() -> str:
    """The plotly.js path the chart pages load: the one in the include, which `make vendor-plotly` rewrites."""
    return re.search(r"\{% static '(vendor/plotly/[^']+)' %\}", (TEMPLATES / PLOTLY_INCLUDE).read_text()).group(1)


def scripts(template: str) -> set[Path]:
    """Our scripts a template loads (pages' modules, the live worker), with every module they import, followed."""
    found = set()
    todo = [STATIC / path for path in re.findall(r"\{% static '(?!vendor/)([^']+\.js)' %\}", template)]
    while todo:
        script = todo.pop().resolve()
        if script not in found:
            found.add(script)
            imports = re.findall(r'^import [^;]*? from "(\.[^"]+)";', script.read_text(), re.M) if script.is_file() else []
            todo += [script.parent / path for path in imports]
    return found


def test_every_page_that_draws_with_plotly_loads_it_through_the_one_include():
    drawing = set()
    for path in TEMPLATES.rglob("*.html"):
        name = path.relative_to(TEMPLATES).as_posix()
        template = path.read_text()
        if name != PLOTLY_INCLUDE:
            assert "vendor/plotly" not in template, f"{name}: load plotly.js with {{% include \"{PLOTLY_INCLUDE}\" %}}"
        if any("Plotly." in script.read_text() for script in scripts(template)):
            drawing.add(name)
            assert f'{{% include "{PLOTLY_INCLUDE}" %}}' in template, name
    assert drawing == CHART_PAGES


def test_our_scripts_are_modules_and_every_import_is_there():
    for path in TEMPLATES.rglob("*.html"):
        template = path.read_text()
        for tag in re.findall(r"<script [^>]*src=\"\{% static '(?!vendor/)[^']+' %\}\"[^>]*>", template):
            assert 'type="module"' in tag, (path.name, tag)
        for script in scripts(template):
            assert script.is_file() and script.is_relative_to(STATIC), script


def version_in(header: str) -> str:
    return re.search(r"plotly\.js(?: \([a-z -]+\))? v(\d+\.\d+\.\d+)", header).group(1)


def test_the_pages_load_the_cartesian_bundle_of_the_installed_plotly_packages_plotly_js():
    assert finders.find(plotly_script()), f"{plotly_script()} is missing: make vendor-plotly"
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
    for script in (STATIC / "experiments").rglob("*.js"):
        # a trace's type, not a button's, a shape's or an axis's
        drawn |= set(re.findall(r'\btype: "(\w+)"', script.read_text())) - {"button", "line", "rect", "linear", "log", "module"}
    assert drawn >= {"scatter", "heatmap"}
    for trace in drawn:
        assert f'moduleType:"trace",name:"{trace}"' in bundle, trace


@pytest.mark.parametrize("path", ["experiments/site.css", "experiments/run_detail.css", "experiments/run_detail.js",
                                  "experiments/experiment_form.js", "experiments/lib/smoothing.js"])
def test_static_files_are_served_without_collectstatic(owner_client, path):
    response = owner_client.get(f"/static/{path}")
    assert response.status_code == 200
    assert response["Cache-Control"] == "max-age=60, public"  # ours change without a new name: asked again soon


@pytest.mark.parametrize("path", ["experiments/run_detail.js", "experiments/run/charts.js",
                                  "experiments/lib/retry.js", "experiments/live_worker.js"])
def test_modules_are_served_as_javascript_which_browsers_need_to_run_them(client, path):
    response = client.get(f"/static/{path}")
    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0] == "text/javascript"


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
