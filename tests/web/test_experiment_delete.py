"""Deleting an experiment: its runs, events, checkpoints and videos go, files included; refused while one of
its runs is queued or running (cancel those first)."""

from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.urls import reverse

from rlweb.experiments import redis_keys
from rlweb.experiments.models import Checkpoint, Event, Experiment, Run, Video


def delete(client, experiment):
    return client.post(reverse("experiment-delete", args=[experiment.pk]))


@pytest.fixture
def video(trained_run) -> Video:
    video = Video(run=trained_run, step=200, episode_return=9.0)
    video.file.save("step_200.mp4", ContentFile(b"\x00\x00\x00\x18ftypmp42"), save=True)
    return video


def test_it_deletes_the_experiment_its_runs_and_their_checkpoint_and_video_files(owner_client, trained_run, video,
                                                                               live_redis, settings):
    experiment = trained_run.experiment
    files = [Path(checkpoint.file.path) for checkpoint in trained_run.checkpoints.all()] + [Path(video.file.path)]
    assert len(files) >= 2 and all(file.is_file() for file in files)
    assert live_redis.exists(redis_keys.stream_key(trained_run.pk))

    response = delete(owner_client, experiment)
    assert response.status_code == 302 and response["Location"] == reverse("experiment-list")
    assert not Experiment.objects.filter(pk=experiment.pk).exists()
    assert not Run.objects.exists() and not Event.objects.exists()
    assert not Checkpoint.objects.exists() and not Video.objects.exists()
    assert not any(file.exists() for file in files)
    assert not [path for path in Path(settings.MEDIA_ROOT).rglob("*") if path.is_file()]
    assert not live_redis.exists(redis_keys.stream_key(trained_run.pk))


@pytest.mark.parametrize("status", ["queued", "running"])
def test_it_refuses_while_a_run_is_queued_or_running(owner_client, trained_run, status):
    Run.objects.filter(pk=trained_run.pk).update(status=status)
    response = owner_client.post(reverse("experiment-delete", args=[trained_run.experiment.pk]), follow=True)
    assert b"cancel its queued or running runs first (1 left)" in response.content
    assert Run.objects.filter(pk=trained_run.pk).exists()
    assert all(Path(checkpoint.file.path).is_file() for checkpoint in trained_run.checkpoints.all())


def test_the_experiment_page_asks_before_deleting_and_disables_it_while_runs_are_active(owner_client, queued_run):
    html = owner_client.get(queued_run.experiment.get_absolute_url()).content.decode()
    assert 'id="delete-form"' in html and "Cancel its 1 queued or running run first." in html
    assert 'class="button button-danger" disabled' in html


def test_a_stranger_gets_a_404_and_nothing_is_deleted(stranger_client, trained_run):
    assert delete(stranger_client, trained_run.experiment).status_code == 404
    assert Run.objects.filter(pk=trained_run.pk).exists()
    assert all(Path(checkpoint.file.path).is_file() for checkpoint in trained_run.checkpoints.all())


def test_delete_takes_only_a_post(owner_client, make_experiment):
    experiment = make_experiment()
    assert owner_client.get(reverse("experiment-delete", args=[experiment.pk])).status_code == 405
    assert Experiment.objects.filter(pk=experiment.pk).exists()


def test_delete_checks_the_csrf_token(owner, make_experiment):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    experiment = make_experiment()
    assert delete(client, experiment).status_code == 403
    assert Experiment.objects.filter(pk=experiment.pk).exists()
