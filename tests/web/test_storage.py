"""Storage quotas (rlweb/experiments/storage_use.py): at the quota the form refuses new runs, a running run keeps only
its best and final checkpoints and says so, and the storage page shows what uses the space."""

from django.apps import apps
from django.core.files.base import ContentFile
from django.urls import reverse

from rlweb.experiments import storage_use
from rlweb.experiments.models import Checkpoint, Event, Experiment, Run, StorageQuota, Video
from rlweb.experiments.sink import RedisSink
from rlweb.sweeps.forms import LaunchBestForm
from tests.web.helpers import form_data

MEGABYTE = storage_use.MEGABYTE


def stored_checkpoint(run: Run, size: int, step: int = 1, tag: str = "periodic") -> Checkpoint:
    checkpoint = Checkpoint(run=run, tag=tag, step=step)
    checkpoint.file.save(f"step_{step}.zip", ContentFile(b"x" * size), save=False)
    checkpoint.size = size
    checkpoint.save()
    return checkpoint


def test_at_the_quota_the_form_refuses_a_new_run_and_says_why(owner_client, queued_run, settings):
    settings.STORAGE_QUOTA_MB = 1
    stored_checkpoint(queued_run, MEGABYTE)
    response = owner_client.post(reverse("experiment-new"), form_data(name="one more"))
    assert response.status_code == 200
    [error] = response.context["form"].non_field_errors()
    assert "take 1.0 MB of the 1.0 MB this site allows you" in error
    assert "take 1.0 MB of the 1.0 MB" in response.content.decode()
    assert not Experiment.objects.filter(name="one more").exists()


def test_a_users_own_quota_replaces_the_sites(owner, queued_run, settings):
    settings.STORAGE_QUOTA_MB = 1
    stored_checkpoint(queued_run, MEGABYTE)
    assert storage_use.full_message(owner)
    StorageQuota.objects.create(user=owner, megabytes=0)  # no limit for this user
    assert storage_use.full_message(owner) is None and storage_use.quota_bytes(owner) is None
    StorageQuota.objects.filter(user=owner).update(megabytes=2)
    assert storage_use.room_bytes(owner) == MEGABYTE


def test_no_quota_is_set_by_default(owner, queued_run):
    stored_checkpoint(queued_run, 3 * MEGABYTE)
    assert storage_use.quota_bytes(owner) is None and storage_use.full_message(owner) is None


def event(tmp_path, kind: str, step: int, size: int, tag: str = "periodic") -> dict:
    path = tmp_path / f"{kind}_{tag}_{step}"
    path.write_bytes(b"x" * size)
    values = {"path": str(path), "step": step, **({"tag": tag} if kind == "checkpoint" else {"episode_return": 1.0})}
    return {"kind": kind, "step": step, "time": 1.0, "values": values}


def test_a_running_run_at_the_quota_keeps_its_best_and_final_checkpoints_and_drops_the_rest_saying_so(
        queued_run, settings, tmp_path):
    settings.STORAGE_QUOTA_MB = 1
    sink = RedisSink(queued_run)
    sink.emit(event(tmp_path, "checkpoint", 100, MEGABYTE // 2))  # fits
    sink.emit(event(tmp_path, "checkpoint", 200, MEGABYTE // 2 + 1))  # would pass the quota
    sink.emit(event(tmp_path, "video", 200, MEGABYTE // 2 + 1))
    sink.emit(event(tmp_path, "checkpoint", 200, MEGABYTE // 2, tag="best"))
    sink.emit(event(tmp_path, "checkpoint", 300, MEGABYTE // 2, tag="final"))
    sink.close()
    kept = Checkpoint.objects.filter(run=queued_run)
    assert sorted((checkpoint.tag, checkpoint.step) for checkpoint in kept) == [
        ("best", 200), ("final", 300), ("periodic", 100)]
    assert all(checkpoint.size == MEGABYTE // 2 for checkpoint in kept)
    assert not Video.objects.exists()
    dropped = [event.values for event in Event.objects.filter(run=queued_run).order_by("seq")][1:3]
    assert dropped[0]["error"].startswith("The periodic checkpoint was not kept: your checkpoints and videos take "
                                          "512.0 KB of your storage quota of 1.0 MB.")
    assert dropped[1]["error"].startswith("The video was not kept") and dropped[1]["video_id"] is None
    assert "keeps its best and final checkpoints" in dropped[1]["error"]


def test_the_storage_page_shows_the_use_per_experiment_and_only_the_users_own(owner_client, make_experiment,
                                                                             stranger, settings):
    settings.STORAGE_QUOTA_MB = 10
    big, small = make_experiment(name="big one"), make_experiment(name="small one")
    stored_checkpoint(Run.objects.create(experiment=big, seed=0, total_steps=400), 3 * MEGABYTE)
    stored_checkpoint(Run.objects.create(experiment=small, seed=0, total_steps=400), 2048)
    theirs = Experiment.objects.create(owner=stranger, name="not yours", algorithm="dqn", env_id="CartPole-v1",
                                       total_steps=400)
    stored_checkpoint(Run.objects.create(experiment=theirs, seed=0, total_steps=400), MEGABYTE)
    html = owner_client.get(reverse("storage")).content.decode()
    assert "Your checkpoints and videos take 3.0 MB of your quota of 10.0 MB (30%)" in html
    assert html.index("big one") < html.index("small one") and "not yours" not in html
    assert "1 · 2.0 KB" in html


def test_sizes_of_files_stored_before_the_size_column_are_filled_in(queued_run):
    checkpoint = stored_checkpoint(queued_run, 1234)
    gone = stored_checkpoint(queued_run, 10, step=2)
    Checkpoint.objects.update(size=0)
    gone.file.storage.delete(gone.file.name)
    fill_sizes = __import__("rlweb.experiments.migrations.0019_checkpoint_video_size_storage_quota",
                            fromlist=["fill_sizes"]).fill_sizes
    fill_sizes(apps, None)
    assert Checkpoint.objects.get(pk=checkpoint.pk).size == 1234 and Checkpoint.objects.get(pk=gone.pk).size == 0


def test_at_the_quota_a_sweep_cannot_launch_its_best_trial_either(owner, queued_run, settings):
    settings.STORAGE_QUOTA_MB = 1
    stored_checkpoint(queued_run, MEGABYTE)
    form = LaunchBestForm({"seeds": "1"}, owner=owner)
    assert not form.is_valid() and "this site allows you" in form.errors["seeds"][0]


def test_the_storage_page_sends_visitors_to_sign_in(client):
    response = client.get(reverse("storage"))
    assert response.status_code == 302 and "login" in response["Location"]
