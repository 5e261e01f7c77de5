"""A points request may be larger than Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB), up to its own bound
(RLWEB_LOGGED_POINTS_MAX_MB, told to the client when it creates the run); past it, 413 naming the bound."""

from __future__ import annotations

import json

from django.conf import settings as django_settings

from rlweb.experiments.models import Event
from rlweb.logged.models import LoggedRun
from tests.web.test_logged_runs import INIT, Api, api  # noqa: F401  (fixture)

METRICS = [f"charts/metric_number_{number:02d}" for number in range(20)]


def many_points(count: int) -> list[dict]:
    return [{"seq": seq, "step": 100 * seq, "time": 0.01 * seq,
             "values": {name: seq + index / 7 for index, name in enumerate(METRICS)}} for seq in range(1, count + 1)]


def test_a_request_of_5000_points_of_20_metrics_is_stored_though_past_djangos_bound(api):
    answer = api.post("/api/logged-runs", INIT)
    run_id = answer.json()["id"]
    told = api.get(f"/api/logged-runs/{run_id}").json()["points_max_bytes"]
    assert answer.json()["points_max_bytes"] == told == 16 * 1024 * 1024
    points = many_points(5_000)
    assert len(json.dumps({"points": points})) > django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    stored = api.points(run_id, points)
    assert stored.status_code == 200, stored.content[:300]
    assert stored.json() == {"stored_through": 5_000, "dropped": []}
    last = Event.objects.filter(run_id=run_id).order_by("-seq").first()
    assert last.step == 500_000 and last.values == points[-1]["values"]


def test_a_points_request_past_the_bound_gets_413_naming_it_and_nothing_is_stored(api, settings):
    settings.LOGGED_POINTS_MAX_MB = 1
    run_id = api.create()
    answer = api.points(run_id, many_points(2_000))  # about 1.6 MB
    assert answer.status_code == 413
    assert "1.0 MB (RLWEB_LOGGED_POINTS_MAX_MB)" in answer.json()["detail"]
    assert LoggedRun.objects.get(pk=run_id).stored_through == 0
    assert api.points(run_id, many_points(1_000)).status_code == 200  # under the bound


def test_a_strangers_large_request_is_refused_before_anything_is_stored(api, stranger):
    run_id = api.create()
    answer = Api(stranger).points(run_id, many_points(100))
    assert answer.status_code == 404
    assert LoggedRun.objects.get(pk=run_id).stored_through == 0
