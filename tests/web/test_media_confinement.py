"""No request reaches a file outside the media folder: checkpoint and video rows whose file name leads out
of MEDIA_ROOT (`../`, an absolute path, a symbolic link) are refused, and the file is neither sent nor read."""

import os
from pathlib import Path

import pytest
from django.urls import reverse

from rlweb.experiments.models import Checkpoint, Video

SECRET = b"the secret key: 0123456789"


@pytest.fixture
def outside_file(settings, tmp_path) -> Path:
    media = Path(settings.MEDIA_ROOT)
    media.mkdir(parents=True, exist_ok=True)
    secret = tmp_path / "secret_key"
    secret.write_bytes(SECRET)
    (media / "checkpoints").mkdir(exist_ok=True)
    os.symlink(secret, media / "checkpoints" / "link.zip")
    return secret


def hostile_names(outside_file) -> list[str]:
    return ["../secret_key", "checkpoints/../../secret_key", str(outside_file), "checkpoints/link.zip"]


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.mark.parametrize("index", range(4))
def test_a_checkpoint_whose_file_leads_outside_media_is_not_sent(owner_client, queued_run, outside_file, index):
    name = hostile_names(outside_file)[index]
    checkpoint = Checkpoint.objects.create(run=queued_run, tag="final", step=400, file=name)
    response = owner_client.get(reverse("checkpoint-download", args=[checkpoint.pk]))
    assert response.status_code in (400, 404) and SECRET not in body(response)
    q_table = owner_client.get(reverse("run-q-table", args=[queued_run.pk]))
    assert q_table.status_code in (400, 404) and SECRET not in body(q_table)
    assert outside_file.read_bytes() == SECRET


@pytest.mark.parametrize("index", range(4))
def test_a_video_whose_file_leads_outside_media_is_not_sent(owner_client, queued_run, outside_file, index):
    video = Video.objects.create(run=queued_run, step=400, file=hostile_names(outside_file)[index])
    for headers in ({}, {"Range": "bytes=0-10"}):
        response = owner_client.get(reverse("video-file", args=[video.pk]), headers=headers)
        assert response.status_code in (400, 404) and SECRET not in body(response)


def test_a_file_inside_media_is_still_sent(owner_client, queued_run, settings):
    inside = Path(settings.MEDIA_ROOT) / "checkpoints" / "run_1" / "final.zip"
    inside.parent.mkdir(parents=True)
    inside.write_bytes(b"zip bytes")
    checkpoint = Checkpoint.objects.create(run=queued_run, tag="final", step=400, file="checkpoints/run_1/final.zip")
    response = owner_client.get(reverse("checkpoint-download", args=[checkpoint.pk]))
    assert response.status_code == 200 and body(response) == b"zip bytes"


@pytest.mark.parametrize("index", range(4))
def test_deleting_an_experiment_never_deletes_a_file_outside_media(owner_client, queued_run, outside_file, index):
    Checkpoint.objects.create(run=queued_run, tag="final", step=400, file=hostile_names(outside_file)[index])
    queued_run.status = "succeeded"
    queued_run.save()
    response = owner_client.post(reverse("experiment-delete", args=[queued_run.experiment_id]))
    assert response.status_code in (302, 400)  # Django answers a SuspiciousFileOperation with a 400
    assert outside_file.read_bytes() == SECRET
