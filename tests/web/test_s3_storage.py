"""Checkpoints and videos in an S3-compatible bucket (RLWEB_S3_*), against a real S3-protocol server (moto's
standalone server, tests/web/s3.py): the worker puts what the trainer wrote into its working folder into the
bucket, and a web server with a media folder of its own serves it from there, streamed or through a short-lived
signed URL; a run resumes from a checkpoint only the bucket holds; deleting an experiment deletes its objects."""

import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import trainer
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from django.urls import reverse

from rlweb.experiments import files
from rlweb.experiments.models import Checkpoint, Event, Experiment, Run, Video
from rlweb.experiments.tasks import train_run
from tests.web.test_run_resume import cancelled_midway


def files_under(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()] if folder.exists() else []


def keys(bucket) -> list[str]:
    return sorted(item.key for item in bucket.objects.all())


def body(response) -> bytes:
    return b"".join(response.streaming_content)


@pytest.fixture
def worker_folders(settings, tmp_path, monkeypatch) -> Path:
    """The worker's own folders: its media folder, and the temporary folder the trainer writes into."""
    folder = tmp_path / "worker"
    (folder / "tmp").mkdir(parents=True)
    settings.MEDIA_ROOT = folder / "media"
    monkeypatch.setattr(tempfile, "tempdir", str(folder / "tmp"))
    return folder


def on_another_host(settings, worker_folder: Path, web_folder: Path) -> None:
    """The worker's folders are gone; the web server has its own, empty media folder."""
    shutil.rmtree(worker_folder)
    settings.MEDIA_ROOT = web_folder / "media"
    tempfile.tempdir = str(web_folder)
    web_folder.mkdir()


@pytest.fixture
def run_in_bucket(s3_bucket, make_experiment, worker_folders, settings, tmp_path) -> Run:
    """A run with checkpoints and videos, trained by the real task on the 'worker', then seen from the web server."""
    experiment = make_experiment(video_interval=200, checkpoint_interval=200)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=experiment.total_steps, task_id="s3-task")
    assert train_run(run.pk) == "succeeded"
    assert files_under(worker_folders / "media") == []  # nothing went to the worker's media folder
    assert files_under(worker_folders / "tmp") == []  # the trainer's working folder is cleaned up
    on_another_host(settings, worker_folders, tmp_path / "web")
    return run


def test_the_worker_puts_checkpoints_and_videos_into_the_bucket_under_their_names(run_in_bucket, s3_bucket):
    checkpoints = list(Checkpoint.objects.filter(run=run_in_bucket))
    videos = list(Video.objects.filter(run=run_in_bucket))
    assert {checkpoint.tag for checkpoint in checkpoints} >= {"periodic", "final"} and len(videos) == 2
    assert keys(s3_bucket) == sorted(row.file.name for row in checkpoints + videos)
    assert f"checkpoints/run_{run_in_bucket.pk}/final.zip" in keys(s3_bucket)


def test_a_checkpoint_written_by_a_worker_with_another_media_folder_downloads_and_loads(
        run_in_bucket, owner_client, settings, tmp_path):
    checkpoint = Checkpoint.objects.get(run=run_in_bucket, tag="final")
    response = owner_client.get(reverse("checkpoint-download", args=[checkpoint.pk]))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == f'attachment; filename="run{run_in_bucket.pk}-final.zip"'
    path = tmp_path / "downloaded.zip"
    path.write_bytes(body(response))
    agent = trainer.load(path)
    assert agent.env_id == "CartPole-v1" and agent.steps_done == run_in_bucket.total_steps
    assert agent.evaluate(episodes=1)["mean"] > 0
    assert files_under(Path(settings.MEDIA_ROOT)) == []  # served from the bucket, not copied to the web's disk


def test_a_video_is_served_from_the_bucket_whole_and_by_byte_range(run_in_bucket, owner_client, s3_bucket):
    video = Video.objects.filter(run=run_in_bucket).first()
    stored = s3_bucket.Object(video.file.name).get()["Body"].read()
    whole = owner_client.get(reverse("video-file", args=[video.pk]))
    assert whole.status_code == 200 and whole["Content-Type"] == "video/mp4" and whole["Accept-Ranges"] == "bytes"
    assert body(whole) == stored and stored[4:8] == b"ftyp"
    ranged = owner_client.get(reverse("video-file", args=[video.pk]), headers={"Range": "bytes=100-199"})
    assert ranged.status_code == 206 and ranged["Content-Range"] == f"bytes 100-199/{len(stored)}"
    assert body(ranged) == stored[100:200]


def test_a_stranger_gets_a_404_for_checkpoints_and_videos(run_in_bucket, stranger_client, settings):
    checkpoint = Checkpoint.objects.filter(run=run_in_bucket).first()
    video = Video.objects.filter(run=run_in_bucket).first()
    for redirect in (False, True):
        settings.S3_REDIRECT = redirect
        assert stranger_client.get(reverse("checkpoint-download", args=[checkpoint.pk])).status_code == 404
        assert stranger_client.get(reverse("video-file", args=[video.pk])).status_code == 404


def test_an_object_missing_from_the_bucket_is_a_404(run_in_bucket, owner_client, s3_bucket):
    checkpoint = Checkpoint.objects.get(run=run_in_bucket, tag="final")
    s3_bucket.Object(checkpoint.file.name).delete()
    assert owner_client.get(reverse("checkpoint-download", args=[checkpoint.pk])).status_code == 404


def test_with_redirects_the_owner_is_sent_to_a_short_lived_signed_url(run_in_bucket, owner_client, s3_bucket,
                                                                      settings):
    settings.S3_REDIRECT = True
    checkpoint = Checkpoint.objects.get(run=run_in_bucket, tag="final")
    response = owner_client.get(reverse("checkpoint-download", args=[checkpoint.pk]))
    assert response.status_code == 302
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(response["Location"]).query)
    assert query["X-Amz-Expires"] == ["600"] and query["X-Amz-Signature"]
    with urllib.request.urlopen(response["Location"], timeout=10) as download:
        assert download.headers["Content-Disposition"] == f'attachment; filename="run{run_in_bucket.pk}-final.zip"'
        content = download.read()
    assert content == s3_bucket.Object(checkpoint.file.name).get()["Body"].read()
    unsigned = response["Location"].split("?")[0]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(unsigned, timeout=10)
    assert refused.value.code == 403  # the objects are private: only a signed URL opens one

    video = Video.objects.filter(run=run_in_bucket).first()
    location = owner_client.get(reverse("video-file", args=[video.pk]))["Location"]
    with urllib.request.urlopen(urllib.request.Request(location, headers={"Range": "bytes=0-99"}), timeout=10) as part:
        assert part.status == 206 and part.headers["Content-Type"] == "video/mp4" and len(part.read()) == 100


def asgi_get(user, url: str):
    """The response to `url` through Django's ASGI handler, with the chunks its async iterator yields."""
    async def get():
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get(url)
        return response, [chunk async for chunk in response.streaming_content]

    return async_to_sync(get)()


def test_under_asgi_a_download_is_streamed_a_chunk_at_a_time(run_in_bucket, owner, s3_bucket):
    big = Checkpoint.objects.create(run=run_in_bucket, tag="periodic", step=1, file="checkpoints/big.zip")
    content = bytes(range(256)) * (3 * files.CHUNK_BYTES // 256 + 7)
    s3_bucket.put_object(Key="checkpoints/big.zip", Body=content)
    response, chunks = asgi_get(owner, reverse("checkpoint-download", args=[big.pk]))
    assert response.status_code == 200 and response.is_async  # Django would read a sync iterator whole first
    assert response["Content-Length"] == str(len(content))
    assert b"".join(chunks) == content and max(map(len, chunks)) <= files.CHUNK_BYTES and len(chunks) == 4


def test_a_run_resumes_from_a_checkpoint_that_only_the_bucket_holds(
        s3_bucket, make_experiment, worker_folders, redis_url, owner_client, settings, tmp_path):
    run = cancelled_midway(make_experiment, redis_url)
    final = Checkpoint.objects.get(run=run, tag="final")
    assert final.step == run.steps_done and final.file.name in keys(s3_bucket)
    on_another_host(settings, worker_folders, tmp_path / "second-worker")

    assert owner_client.post(reverse("run-resume", args=[run.pk])).status_code == 302
    assert train_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.start_step == final.step and run.steps_done == run.total_steps and run.attempts == 2
    resumed = Checkpoint.objects.get(run=run, tag="final")
    assert resumed.step == run.total_steps and keys(s3_bucket).count(resumed.file.name) == 1
    assert final.file.name not in keys(s3_bucket)  # the replaced final checkpoint went with its row
    assert files_under(Path(settings.MEDIA_ROOT)) == []


def test_deleting_an_experiment_deletes_its_objects_from_the_bucket(run_in_bucket, owner_client, s3_bucket,
                                                                    make_experiment):
    other = make_experiment(name="kept")
    kept = Run.objects.create(experiment=other, seed=0, total_steps=other.total_steps, task_id="kept-task")
    assert train_run(kept.pk) == "succeeded"
    kept_keys = [checkpoint.file.name for checkpoint in kept.checkpoints.all()]
    assert kept_keys and len(keys(s3_bucket)) > len(kept_keys)

    response = owner_client.post(reverse("experiment-delete", args=[run_in_bucket.experiment_id]))
    assert response.status_code == 302 and not Experiment.objects.filter(pk=run_in_bucket.experiment_id).exists()
    assert keys(s3_bucket) == sorted(kept_keys)

    kept.delete()  # a run deleted on its own (the admin) takes its objects too
    assert keys(s3_bucket) == []


def test_without_a_bucket_files_stay_in_the_local_media_folder_and_stream_under_asgi(trained_run, owner, settings):
    final = Checkpoint.objects.get(run=trained_run, tag="final")
    assert Path(settings.MEDIA_ROOT, final.file.name).is_file()
    response, chunks = asgi_get(owner, reverse("checkpoint-download", args=[final.pk]))
    assert response.status_code == 200 and response.is_async
    assert b"".join(chunks) == Path(settings.MEDIA_ROOT, final.file.name).read_bytes()


def test_a_bucket_that_refuses_the_files_is_reported_and_the_run_trains_on(s3_bucket, make_experiment):
    s3_bucket.delete()  # gone: every upload fails with NoSuchBucket, as one would against a bucket that is down
    experiment = make_experiment(checkpoint_interval=200)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=experiment.total_steps, task_id="no-bucket")
    assert train_run(run.pk) == "succeeded"
    reported = [event.values for event in Event.objects.filter(run=run, kind="checkpoint")]
    assert len(reported) >= 2 and all(values["checkpoint_id"] is None for values in reported)
    assert all(values["error"].startswith("The checkpoint could not be stored: ") for values in reported)
    assert not Checkpoint.objects.filter(run=run).exists()
