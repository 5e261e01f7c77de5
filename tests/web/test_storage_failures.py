"""A checkpoint or video the web side cannot copy into storage (a file where its folder must be, a full
disk) is reported on the run, gets no row, and leaves no file, partial or whole."""

import resource
import signal

import trainer
from django.core.files.storage import default_storage
from django.urls import reverse

from rlweb.experiments import history
from rlweb.experiments.models import Checkpoint, Event, Video
from rlweb.experiments.sink import RedisSink
from tests.web.helpers import TINY_DQN


def checkpoint_event(path, tag="periodic", step=100):
    return {"kind": "checkpoint", "step": step, "time": 1.0, "values": {"path": str(path), "tag": tag, "step": step}}


def test_a_checkpoint_that_cannot_be_stored_is_reported_and_gets_no_row(queued_run, owner_client, tmp_path, settings):
    path = trainer.make("dqn", "CartPole-v1", device="cpu", **TINY_DQN).save(tmp_path / "step.zip")
    sink = RedisSink(queued_run)
    sink.emit(checkpoint_event(path, "best", 100))
    (settings.MEDIA_ROOT / "checkpoints" / f"run_{queued_run.pk}").rename(tmp_path / "moved")
    (settings.MEDIA_ROOT / "checkpoints" / f"run_{queued_run.pk}").write_text("a file where the folder must be")
    sink.emit(checkpoint_event(path, "best", 200))
    sink.close()
    assert list(Checkpoint.objects.filter(run=queued_run).values_list("step", flat=True)) == [100]  # the old best stays
    failed = Event.objects.get(run=queued_run, step=200).values
    assert failed["checkpoint_id"] is None and failed["error"].startswith("The checkpoint could not be stored: ")
    assert failed in [event["values"] for event in history.history(queued_run)["log"]]  # the page's log shows it
    page = owner_client.get(reverse("run-detail", args=[queued_run.pk])).content.decode()
    assert 'id="run-warnings"' in page


def test_a_disk_that_fills_up_mid_copy_leaves_no_partial_video(queued_run, tmp_path, settings):
    video = tmp_path / "video.mp4"
    video.write_bytes(b"\0" * 200_000)
    sink = RedisSink(queued_run)
    folder = settings.MEDIA_ROOT / "videos" / f"run_{queued_run.pk}"
    folder.mkdir(parents=True)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, limit[1]))
    try:
        sink.emit({"kind": "video", "step": 50, "time": 1.0, "values": {"path": str(video), "step": 50}})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, previous)
    sink.close()
    assert not Video.objects.filter(run=queued_run).exists()
    assert list(folder.iterdir()) == []  # the 100,000 bytes written before the failure went with their temporary file
    values = Event.objects.get(run=queued_run).values
    assert values["video_id"] is None and "File too large" in values["error"]
    assert default_storage.listdir(f"videos/run_{queued_run.pk}") == ([], [])
