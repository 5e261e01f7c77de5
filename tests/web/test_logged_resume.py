"""A logged run resumed by its script started again (POST /api/logged-runs/ID/resume, rlweb/logged/runs.py): after a
crash, a preemption or to train longer, with a real token, database and Redis. It is running again whatever its
status, its log says which attempt ended and how, its points number on after the stored ones, and with `from_step`
what it logged past that step (points, videos, checkpoints) is forgotten, the charts included, while a page that
drew the forgotten points is told to reload."""

from __future__ import annotations

import pytest
from django.urls import reverse

from rlweb.experiments.live import run_status
from rlweb.experiments.models import Checkpoint, Event, Run, Video
from rlweb.experiments.redis_keys import redis_client, stream_key
from rlweb.logged.models import LoggedRun
from tests.web.test_logged_runs import Api, drawn, point


@pytest.fixture
def api(owner):
    return Api(owner)


def resume(api: Api, run_id: int, **body):
    return api.post(f"/api/logged-runs/{run_id}/resume", {"host": "lab-gpu-7", "command": "python train.py",
                                                          "client_version": "0.3.0", **body})


def test_a_failed_run_resumed_goes_on_after_its_stored_points_with_its_log_saying_how_it_ended(api, owner_client):
    run_id = api.create()
    api.points(run_id, [point(seq, loss=float(seq)) for seq in range(1, 11)])  # steps 100 .. 1000, 0.5 .. 5 s
    api.post(f"/api/logged-runs/{run_id}/finish", {"status": "failed", "last_seq": 10,
                                                   "error": "Traceback ...\nRuntimeError: CUDA error: out of memory"})
    answer = resume(api, run_id)
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"id": run_id, "experiment_id": Run.objects.get(pk=run_id).experiment_id,
                             "url": f"http://testserver/runs/{run_id}/", "next_seq": 11, "step": 1000,
                             "seconds": 5.0, "points_max_bytes": answer.json()["points_max_bytes"]}
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.RUNNING and run.error == "" and run.finished_at is None and run.attempts == 2
    logged = LoggedRun.objects.get(pk=run_id)
    assert (logged.host, logged.command, logged.client_version) == ("lab-gpu-7", "python train.py", "0.3.0")
    resumed = Event.objects.get(run_id=run_id, kind="resumed")
    assert resumed.step == 1000 and resumed.values == {
        "attempt": 1, "interrupted": "failed", "reason": "RuntimeError: CUDA error: out of memory", "from_step": 1000,
        "script": "lab-gpu-7", "forgot_after": False}
    assert api.points(run_id, [point(11, loss=11.0), point(12, loss=12.0)]).json()["stored_through"] == 12
    assert drawn(owner_client, run_id)["loss"]["value"] == [float(seq) for seq in range(1, 13)]
    assert api.post(f"/api/logged-runs/{run_id}/finish", {"status": "succeeded", "last_seq": 12}).json() == {
        "status": "succeeded"}


def test_a_run_whose_script_was_killed_is_resumed_while_it_still_shows_running(api):
    run_id = api.create()
    api.points(run_id, [point(1, loss=1.0)])
    assert resume(api, run_id).json()["next_seq"] == 2
    resumed = Event.objects.get(run_id=run_id, kind="resumed")
    assert resumed.values["interrupted"] == "running"
    assert resumed.values["reason"] == "its script stopped without finishing the run"


def test_resuming_from_a_step_forgets_what_was_logged_past_it_charts_files_and_all(api, owner_client):
    run_id = api.create()
    api.points(run_id, [point(seq, loss=float(seq)) for seq in range(1, 6)])  # steps 100 .. 500
    assert api.upload(run_id, "checkpoint", 300, b"kept weights", "agent.pt").status_code == 201
    api.points(run_id, [point(seq, loss=float(seq)) for seq in range(6, 11)])  # steps 600 .. 1000
    assert api.upload(run_id, "checkpoint", 900, b"late weights", "agent.pt").status_code == 201
    assert api.upload(run_id, "video", 800, b"a late video", "episode.mp4").status_code == 201
    late_file = Checkpoint.objects.get(run_id=run_id, step=900).file.name
    followed_to = Event.objects.filter(run_id=run_id).order_by("-seq").first().seq  # a page drew every event

    answer = resume(api, run_id, from_step=500)
    assert answer.json()["next_seq"] == 11 and answer.json()["step"] == 500 and answer.json()["seconds"] == 2.5
    assert sorted(Event.objects.filter(run_id=run_id, kind="train").values_list("step", flat=True)) == [
        100, 200, 300, 400, 500]
    assert list(Checkpoint.objects.filter(run_id=run_id).values_list("step", flat=True)) == [300]
    assert not Video.objects.filter(run_id=run_id).exists()
    assert not Checkpoint.file.field.storage.exists(late_file)
    assert drawn(owner_client, run_id)["loss"]["step"] == [100, 200, 300, 400, 500]
    run = Run.objects.get(pk=run_id)
    assert run.steps_done == 500
    resumed = Event.objects.get(run_id=run_id, kind="resumed")
    assert resumed.seq > followed_to and resumed.values["forgot_after"] is True
    assert run_status(run_id, followed_to) == "reset"  # the page that drew step 1000 reloads
    assert run_status(run_id, 3) == "running"  # one that drew only kept events follows on
    streamed = redis_client().xrange(stream_key(run_id))
    assert [entry_id for entry_id, _ in streamed] == [f"{resumed.seq}-0"]  # the forgotten ones are gone from it

    api.points(run_id, [{"seq": 11, "step": 600, "time": 3.0, "values": {"loss": 6.5}}])
    assert drawn(owner_client, run_id)["loss"]["value"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.5]
    assert Event.objects.get(run_id=run_id, kind="train", step=600).seq > resumed.seq


def test_resuming_twice_from_steps_keeps_one_history_without_repeats(api, owner_client):
    run_id = api.create()
    api.points(run_id, [point(seq, loss=float(seq)) for seq in range(1, 11)])
    resume(api, run_id, from_step=800)
    api.points(run_id, [{"seq": 11, "step": 900, "time": 1.0, "values": {"loss": 9.5}}])
    resume(api, run_id, from_step=400)
    api.points(run_id, [{"seq": 12, "step": 500, "time": 1.0, "values": {"loss": 5.5}}])
    assert drawn(owner_client, run_id)["loss"]["step"] == [100, 200, 300, 400, 500]
    assert drawn(owner_client, run_id)["loss"]["value"] == [1.0, 2.0, 3.0, 4.0, 5.5]
    assert Run.objects.get(pk=run_id).attempts == 3
    seqs = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))
    assert len(seqs) == len(set(seqs))


def test_only_the_runs_owner_or_an_editor_resumes_a_logged_run_and_bad_steps_are_refused(api, owner, make_experiment,
                                                                                         django_user_model):
    from rlweb.projects.models import Membership, Project

    run_id = api.create()
    stranger = Api(django_user_model.objects.create_user("someone", password="a long test password 5"))
    assert resume(stranger, run_id).status_code == 404
    trained = Run.objects.create(experiment=make_experiment(), total_steps=10, status=Run.Status.FAILED)
    assert resume(api, trained.pk).status_code == 404  # a run trained here resumes from its page
    assert resume(api, run_id, from_step=-1).status_code == 422
    assert resume(api, run_id, from_step="last").status_code == 422

    lab = Project.objects.create(name="lab", owner=owner)
    viewer = django_user_model.objects.create_user("viewer", password="a long test password 3")
    Membership.objects.create(project=lab, user=viewer, role=Membership.Role.VIEWER)
    shared = api.create(project=lab.pk)
    api.post(f"/api/logged-runs/{shared}/finish", {"status": "cancelled"})
    assert resume(Api(viewer), shared).status_code == 403
    assert Run.objects.get(pk=shared).status == Run.Status.CANCELLED
    assert not Event.objects.filter(kind="resumed").exists()



def test_the_page_of_a_logged_run_that_did_not_succeed_says_how_its_script_goes_on_in_it(api, owner_client):
    run_id = api.create()
    hint = f"resume={run_id}, from_step=STEP"
    assert hint not in owner_client.get(reverse("run-detail", args=[run_id])).content.decode()  # running
    api.post(f"/api/logged-runs/{run_id}/finish", {"status": "failed", "error": "killed"})
    assert hint in owner_client.get(reverse("run-detail", args=[run_id])).content.decode()
    resume(api, run_id)
    api.post(f"/api/logged-runs/{run_id}/finish", {"status": "succeeded"})
    assert hint not in owner_client.get(reverse("run-detail", args=[run_id])).content.decode()


def test_resuming_from_step_0_starts_the_run_over_step_0_points_and_files_included(api, owner_client):
    run_id = api.create()
    api.points(run_id, [{"seq": 1, "step": 0, "time": 0.0, "values": {"eval/return_mean": 9.0}},
                        {"seq": 2, "step": 100, "time": 1.0, "values": {"loss": 1.0}}])
    assert api.upload(run_id, "video", 0, b"a first video", "episode.mp4").status_code == 201
    resume(api, run_id, from_step=0)
    kinds = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("kind", flat=True))
    assert kinds == ["started", "resumed"] and not Video.objects.filter(run_id=run_id).exists()
    assert drawn(owner_client, run_id) == {}
    api.points(run_id, [{"seq": 3, "step": 0, "time": 0.0, "values": {"eval/return_mean": 9.5}}])
    assert drawn(owner_client, run_id)["eval/return_mean"]["value"] == [9.5]  # once, the new attempt's
