"""Static files: our pages' CSS and JS, and plotly.js from the installed plotly package (no CDN)."""

from pathlib import Path

import plotly
from django.contrib.staticfiles import finders


def test_plotly_is_found_in_the_installed_package():
    found = finders.find("vendor/plotly/plotly.min.js")
    assert found and Path(found) == Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert finders.find("vendor/plotly/widgetbundle.js") is None  # only the one file


def test_static_files_are_served_without_collectstatic(owner_client):
    for path in ["vendor/plotly/plotly.min.js", "experiments/site.css", "experiments/run_detail.css",
                 "experiments/run_detail.js", "experiments/experiment_form.js"]:
        response = owner_client.get(f"/static/{path}")
        assert response.status_code == 200, path
    response = owner_client.get("/static/vendor/plotly/plotly.min.js")
    assert b"plotly" in b"".join(response.streaming_content)[:2000].lower()


def test_static_files_do_not_need_a_login(client):
    assert client.get("/static/experiments/site.css").status_code == 200
