"""The API's runs: list with filters, read, cancel, resume, live hyperparameter changes; metrics downsampled and
raw, the log, checkpoints and videos with their files. A stranger gets 404 on every one."""

from __future__ import annotations

import json

import pytest
from django.core.files.base import ContentFile

from rlweb.experiments import history
from rlweb.experiments.models import Checkpoint, Run, Video
from rlweb.experiments.redis_keys import changes_key
from tests.web.api_helpers import owner_api, stranger_api  # noqa: F401  (fixtures)
from tests.web.helpers import body_of


def test_the_list_filters_by_status_experiment_algorithm_and_env(owner_api, make_experiment):
    dqn, ppo = make_experiment(name="d"), make_experiment(name="p", algorithm="ppo", env_id="Acrobot-v1")
    queued = Run.objects.create(experiment=dqn, seed=0, total_steps=400)
    done = Run.objects.create(experiment=ppo, seed=0, total_steps=400, status=Run.Status.SUCCEEDED)

    def ids(query: str) -> list[int]:
        response = owner_api.get(f"/api/runs{query}")
        assert response.status_code == 200
        return [item["id"] for item in response.json()["items"]]

    assert sorted(ids("")) == sorted([queued.pk, done.pk])
    assert ids("?status=succeeded") == [done.pk]
    assert ids(f"?experiment={dqn.pk}") == [queued.pk]
    assert ids("?algorithm=ppo") == [done.pk]
    assert ids("?env=Acrobot-v1") == [done.pk]
    assert owner_api.get("/api/runs?experiment=x").status_code == 422


def test_cancel_and_resume_use_the_lifecycle(owner_api, queued_run):
    assert owner_api.post(f"/api/runs/{queued_run.pk}/cancel").json() == {"outcome": "cancelled"}
    assert owner_api.post(f"/api/runs/{queued_run.pk}/cancel").json() == {"outcome": "ended"}
    assert owner_api.post(f"/api/runs/{queued_run.pk}/resume").json() == {"outcome": "queued"}
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.QUEUED
    assert owner_api.post(f"/api/runs/{queued_run.pk}/resume").status_code == 409


def test_a_resume_refused_by_the_storage_quota_says_why(owner_api, queued_run, settings):
    settings.STORAGE_QUOTA_MB = 1
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.CANCELLED)
    Checkpoint.objects.create(run=queued_run, tag="final", step=10, file="checkpoints/none.zip", size=2 * 2**20)
    response = owner_api.post(f"/api/runs/{queued_run.pk}/resume")
    assert response.status_code == 409 and "2.0 MB of the 1.0 MB" in response.json()["detail"]
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.CANCELLED


def test_a_live_change_is_checked_recorded_and_sent_to_the_worker(owner_api, queued_run, live_redis):
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING)
    path = f"/api/runs/{queued_run.pk}/hyperparameters"
    response = owner_api.post_json(path, {"values": {"learning_rate": 0.0005}})
    assert response.status_code == 200, response.content
    assert response.json()["change"]["values"] == {"learning_rate": 0.0005}
    assert json.loads(live_redis.lpop(changes_key(queued_run.pk)))["values"] == {"learning_rate": 0.0005}
    refused = owner_api.post_json(path, {"values": {"learning_rate": -1}})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "hyperparameters", "learning_rate"]
    assert owner_api.post_json(path, {"values": {"batch_size": 64}}).status_code == 422  # not live
    assert owner_api.post_json(path, {"values": {}, "extra": 1}).status_code == 422


def test_a_change_to_a_run_that_is_not_running_gets_409(owner_api, queued_run):
    response = owner_api.post_json(f"/api/runs/{queued_run.pk}/hyperparameters", {"values": {"learning_rate": 0.01}})
    assert response.status_code == 409


def test_a_trained_runs_metrics_events_log_and_files(owner_api, trained_run):
    Video.objects.create(run=trained_run, step=400, episode_return=9.0,
                         file=ContentFile(b"\x00\x00\x00\x18ftypmp42", name="v.mp4"))
    base = f"/api/runs/{trained_run.pk}"
    assert owner_api.get(base).json()["status"] == "succeeded"
    metrics = owner_api.get(f"{base}/metrics").json()
    assert metrics["metrics"] == json.loads(json.dumps(history.metric_series(trained_run)))
    assert "rollout/episode_return" in metrics["metrics"]
    first = owner_api.get(f"{base}/events?limit=3").json()
    assert [event["seq"] for event in first["events"]] == [1, 2, 3] and first["next_after"] == 3
    evals = owner_api.get(f"{base}/events?kinds=eval").json()["events"]
    assert evals and {event["kind"] for event in evals} == {"eval"}
    assert owner_api.get(f"{base}/events?kinds=bogus").status_code == 400
    assert owner_api.get(f"{base}/events?limit=0").status_code == 422
    log = owner_api.get(f"{base}/log").json()
    assert log[0]["kind"] == "started" and log[-1]["kind"] == "finished"
    checkpoints = owner_api.get(f"{base}/checkpoints").json()
    final = next(item for item in checkpoints if item["tag"] == "final")
    download = owner_api.get(final["download_url"])
    assert download.status_code == 200 and body_of(download)[:2] == b"PK"  # a zip
    videos = owner_api.get(f"{base}/videos").json()
    assert [item["step"] for item in videos] == [400]
    assert body_of(owner_api.get(videos[0]["download_url"])) == b"\x00\x00\x00\x18ftypmp42"


@pytest.mark.parametrize("method,suffix", [
    ("get", ""), ("post", "/cancel"), ("post", "/resume"), ("get", "/metrics"), ("get", "/events"),
    ("get", "/log"), ("get", "/checkpoints"), ("get", "/videos")])
def test_a_stranger_gets_404_on_a_run(stranger_api, queued_run, method, suffix):
    assert getattr(stranger_api, method)(f"/api/runs/{queued_run.pk}{suffix}").status_code == 404
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.QUEUED


def test_a_stranger_gets_404_on_files_and_changes(stranger_api, trained_run):
    checkpoint = trained_run.checkpoints.first()
    video = Video.objects.create(run=trained_run, step=1, file=ContentFile(b"x", name="v.mp4"))
    assert stranger_api.get(f"/api/checkpoints/{checkpoint.pk}/download").status_code == 404
    assert stranger_api.get(f"/api/videos/{video.pk}/download").status_code == 404
    assert stranger_api.post_json(f"/api/runs/{trained_run.pk}/hyperparameters",
                                  {"values": {"learning_rate": 0.1}}).status_code == 404
    assert stranger_api.get("/api/runs").json()["count"] == 0
