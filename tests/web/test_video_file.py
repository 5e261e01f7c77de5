"""Episode videos of a run trained by the real task: Video rows with mp4 files in storage, served to the
owner's `<video>` element (whole or by byte range), listed newest first; 404 for strangers."""

import imageio.v2 as imageio
import pytest
from django.urls import reverse

from rlweb.experiments.models import Event, Run, Video
from rlweb.experiments.tasks import train_run


@pytest.fixture
def run_with_videos(make_experiment) -> Run:
    experiment = make_experiment(video_interval=200)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=experiment.total_steps, task_id="video-task")
    assert train_run(run.pk) == "succeeded"
    return run


def test_the_task_keeps_a_video_per_interval_and_one_at_the_end(run_with_videos, tmp_path):
    videos = list(Video.objects.filter(run=run_with_videos))
    assert [video.step for video in videos] == [400, 200]  # newest first, the last one at the end of training
    events = list(Event.objects.filter(run=run_with_videos, kind="video"))
    assert sorted(event.values["video_id"] for event in events) == sorted(video.pk for video in videos)
    for video in videos:
        assert video.file.name == f"videos/run_{run_with_videos.pk}/step_{video.step}.mp4"
        assert video.episode_return is not None and video.episode_return > 0
        path = tmp_path / f"{video.step}.mp4"
        path.write_bytes(video.file.read())
        reader = imageio.get_reader(path)
        assert reader.get_meta_data()["codec"] == "h264"
        assert reader.get_next_data().shape[2] == 3


def test_the_owner_gets_the_whole_mp4(owner_client, run_with_videos):
    video = Video.objects.filter(run=run_with_videos).first()
    response = owner_client.get(reverse("video-file", args=[video.pk]))
    assert response.status_code == 200
    assert response["Content-Type"] == "video/mp4" and response["Accept-Ranges"] == "bytes"
    body = b"".join(response.streaming_content)
    assert body == video.file.open("rb").read() and body[4:8] == b"ftyp"


@pytest.mark.parametrize("header, first, last", [("bytes=0-99", 0, 99), ("bytes=100-", 100, None),
                                                 ("bytes=-50", -50, None)])
def test_a_byte_range_is_a_206_with_those_bytes(owner_client, run_with_videos, header, first, last):
    video = Video.objects.filter(run=run_with_videos).first()
    whole = video.file.open("rb").read()
    response = owner_client.get(reverse("video-file", args=[video.pk]), headers={"Range": header})
    assert response.status_code == 206
    expected = whole[first:last + 1 if last is not None else None]
    assert b"".join(response.streaming_content) == expected  # streamed, never read whole into memory
    start = first if first >= 0 else len(whole) + first
    assert response["Content-Range"] == f"bytes {start}-{start + len(expected) - 1}/{len(whole)}"


def test_a_range_past_the_end_is_a_416(owner_client, run_with_videos):
    video = Video.objects.filter(run=run_with_videos).first()
    response = owner_client.get(reverse("video-file", args=[video.pk]), headers={"Range": "bytes=99999999-"})
    assert response.status_code == 416 and response["Content-Range"] == f"bytes */{video.file.size}"


def test_the_run_page_and_its_history_list_the_videos_newest_first(owner_client, run_with_videos):
    videos = list(Video.objects.filter(run=run_with_videos))
    data = owner_client.get(reverse("run-history", args=[run_with_videos.pk])).json()
    assert [item["id"] for item in data["videos"]] == [video.pk for video in videos]
    assert "video" in [event["kind"] for event in data["log"]]
    html = owner_client.get(reverse("run-detail", args=[run_with_videos.pk])).content.decode()
    sources = [f'<video controls preload="metadata" src="{reverse("video-file", args=[video.pk])}#t=0.1">'
               for video in videos]
    assert all(source in html for source in sources)
    assert html.index(sources[0]) < html.index(sources[1])


def test_a_stranger_gets_a_404_and_a_missing_file_is_a_404(owner_client, stranger_client, run_with_videos):
    video = Video.objects.filter(run=run_with_videos).first()
    assert stranger_client.get(reverse("video-file", args=[video.pk])).status_code == 404
    assert owner_client.get(reverse("video-file", args=[987654])).status_code == 404
    video.file.storage.delete(video.file.name)
    assert owner_client.get(reverse("video-file", args=[video.pk])).status_code == 404
