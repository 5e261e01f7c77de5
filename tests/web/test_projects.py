"""Shared projects: a viewer sees everything in the project and changes nothing (403), an editor acts on it, a
non-member gets 404, removing a member takes their access away at once, and only the owner manages members."""

from __future__ import annotations

import pytest
from django.test import Client

from rlweb.api.models import ApiToken
from rlweb.experiments.forms import ExperimentForm
from rlweb.experiments.models import CheckpointJob, Experiment, Run
from rlweb.projects.models import Membership, Project
from rlweb.sweeps.forms import SweepForm
from rlweb.sweeps.models import Sweep
from tests.web.helpers import PASSWORD, body_of


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def bearer(user) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(user, 'test')[1]}"}


@pytest.fixture
def project(owner):
    return Project.objects.create(name="lab", owner=owner)


@pytest.fixture
def viewer(django_user_model, project):
    user = django_user_model.objects.create_user("viewer", password=PASSWORD)
    Membership.objects.create(project=project, user=user, role="viewer")
    return user


@pytest.fixture
def editor(django_user_model, project):
    user = django_user_model.objects.create_user("editor", password=PASSWORD)
    Membership.objects.create(project=project, user=user, role="editor")
    return user


@pytest.fixture
def shared(trained_run, project):
    """The owner's trained run in the project, with a queued and a cancelled run beside it."""
    experiment = trained_run.experiment
    Experiment.objects.filter(pk=experiment.pk).update(project=project, name="shared-experiment")
    experiment.refresh_from_db()
    queued = Run.objects.create(experiment=experiment, seed=1, total_steps=400)
    cancelled = Run.objects.create(experiment=experiment, seed=2, total_steps=400, status="cancelled")
    return {"experiment": experiment, "run": trained_run, "queued": queued, "cancelled": cancelled,
            "checkpoint": trained_run.checkpoints.first()}


def read_urls(shared) -> list[str]:
    run, experiment = shared["run"], shared["experiment"]
    return [f"/experiments/{experiment.pk}/", f"/runs/{run.pk}/", f"/runs/{run.pk}/history.json",
            f"/runs/{run.pk}/events.json", f"/runs/{run.pk}/events.csv", f"/runs/{run.pk}/jobs/",
            f"/checkpoints/{shared['checkpoint'].pk}/download/", f"/compare/data.json?runs={run.pk}",
            "/?project=%d" % experiment.project_id, "/runs/"]


def test_a_viewer_sees_the_experiment_its_runs_streams_files_and_api_reads(viewer, shared):
    client = signed_in(viewer)
    for url in read_urls(shared):
        response = client.get(url)
        assert response.status_code == 200, url
    assert b"shared-experiment" in body_of(client.get("/"))
    assert client.get(f"/runs/stream?runs={shared['run'].pk}").status_code == 200
    assert client.get(f"/runs/{shared['run'].pk}/stream").status_code == 200
    token = bearer(viewer)
    api = Client()
    for url in (f"/api/experiments/{shared['experiment'].pk}", f"/api/runs/{shared['run'].pk}",
                f"/api/runs/{shared['run'].pk}/metrics", f"/api/checkpoints/{shared['checkpoint'].pk}/download"):
        assert api.get(url, **token).status_code == 200, url
    assert [row["name"] for row in api.get("/api/experiments", **token).json()["items"]] == ["shared-experiment"]


def test_a_viewer_cannot_cancel_resume_change_take_notes_or_delete(viewer, shared):
    client, queued, cancelled = signed_in(viewer), shared["queued"], shared["cancelled"]
    experiment = shared["experiment"]
    for url in (f"/runs/{queued.pk}/cancel/", f"/runs/{cancelled.pk}/resume/", f"/runs/{queued.pk}/change/",
                f"/runs/{queued.pk}/notes/", f"/experiments/{experiment.pk}/notes/", f"/runs/{queued.pk}/jobs/",
                f"/runs/{queued.pk}/jobs/cancel/", f"/experiments/{experiment.pk}/delete/"):
        assert client.post(url, {"notes": "mine now"}).status_code == 403, url
    token, api = bearer(viewer), Client()
    assert api.post(f"/api/runs/{queued.pk}/cancel", **token).status_code == 403
    assert api.post(f"/api/runs/{cancelled.pk}/resume", **token).status_code == 403
    assert api.post(f"/api/experiments/{experiment.pk}/cancel", **token).status_code == 403
    assert api.delete(f"/api/experiments/{experiment.pk}", **token).status_code == 403
    assert Run.objects.get(pk=queued.pk).status == "queued"
    assert Run.objects.get(pk=cancelled.pk).status == "cancelled"
    experiment.refresh_from_db()
    assert experiment.notes == "" and Run.objects.get(pk=queued.pk).notes == ""


def test_a_viewer_cannot_launch_into_the_project_and_an_editor_can(viewer, editor, project):
    assert list(ExperimentForm(owner=viewer).fields["project"].queryset) == []
    assert list(ExperimentForm(owner=editor).fields["project"].queryset) == [project]
    response = signed_in(viewer).post("/experiments/new/", {"algorithm": "dqn", "env_id": "CartPole-v1",
                                                            "project": project.pk})
    assert response.status_code == 200 and b"Select a valid choice" in body_of(response)
    assert not Experiment.objects.filter(project=project).exists()


def test_an_editor_cancels_resumes_takes_notes_and_deletes(editor, shared):
    client, queued, cancelled = signed_in(editor), shared["queued"], shared["cancelled"]
    assert client.post(f"/runs/{queued.pk}/cancel/").status_code == 302
    assert Run.objects.get(pk=queued.pk).status == "cancelled"
    assert client.post(f"/runs/{cancelled.pk}/notes/", {"notes": "seen"}).status_code == 302
    assert Run.objects.get(pk=cancelled.pk).notes == "seen"
    assert Client().post(f"/api/runs/{cancelled.pk}/resume", **bearer(editor)).json() == {"outcome": "queued"}
    Run.objects.filter(experiment=shared["experiment"]).update(status="cancelled")
    assert client.post(f"/experiments/{shared['experiment'].pk}/delete/").status_code == 302
    assert not Experiment.objects.filter(pk=shared["experiment"].pk).exists()


def test_a_non_member_gets_404_for_everything_in_the_project(stranger, shared, project):
    client = signed_in(stranger)
    for url in read_urls(shared)[:7] + [f"/projects/{project.pk}/"]:
        assert client.get(url).status_code == 404, url
    assert client.post(f"/runs/{shared['queued'].pk}/cancel/").status_code == 404
    assert client.get(f"/runs/stream?runs={shared['run'].pk}").status_code == 404
    assert Client().get(f"/api/runs/{shared['run'].pk}", **bearer(stranger)).status_code == 404
    assert b"shared-experiment" not in body_of(client.get("/"))


def test_removing_a_member_takes_their_access_away_at_once(owner, viewer, shared, project):
    client = signed_in(viewer)
    url = f"/runs/{shared['run'].pk}/"
    assert client.get(url).status_code == 200
    response = signed_in(owner).post(f"/projects/{project.pk}/members/remove/", {"username": "viewer"})
    assert response.status_code == 302
    assert client.get(url).status_code == 404
    assert client.get(f"/projects/{project.pk}/").status_code == 404


def test_only_the_owner_manages_members(owner, editor, viewer, stranger, project):
    assert signed_in(editor).post(f"/projects/{project.pk}/members/", {"username": "stranger",
                                                                        "role": "editor"}).status_code == 403
    assert signed_in(stranger).post(f"/projects/{project.pk}/members/", {"username": "stranger",
                                                                          "role": "editor"}).status_code == 404
    assert signed_in(viewer).post(f"/projects/{project.pk}/members/remove/", {"username": "editor"}).status_code == 403
    assert Client().post(f"/api/projects/{project.pk}/members", {"username": "stranger"}, content_type="application/json",
                         **bearer(editor)).status_code == 403
    assert not Membership.objects.filter(user=stranger).exists()
    owner_client = signed_in(owner)
    owner_client.post(f"/projects/{project.pk}/members/", {"username": "viewer", "role": "editor"})
    assert Membership.objects.get(user=viewer).role == "editor"
    answer = Client().post(f"/api/projects/{project.pk}/members", {"username": "stranger", "role": "viewer"},
                           content_type="application/json", **bearer(owner))
    assert answer.status_code == 200
    assert {"username": "stranger", "role": "viewer"} in answer.json()["members"]
    assert Client().delete(f"/api/projects/{project.pk}/members/stranger", **bearer(owner)).status_code == 204
    assert not Membership.objects.filter(user=stranger).exists()


def test_the_projects_page_makes_a_project_and_lists_it_with_the_role(owner, viewer, project):
    response = signed_in(owner).post("/projects/", {"name": "second"})
    assert Project.objects.get(name="second").owner == owner
    assert response.status_code == 302
    page = body_of(signed_in(viewer).get("/projects/"))
    assert b"lab" in page and b"viewer" in page and b"second" not in page
    created = Client().post("/api/projects", {"name": "third"}, content_type="application/json", **bearer(viewer))
    assert created.status_code == 201 and created.json()["owner"] == "viewer"
    assert [row["name"] for row in Client().get("/api/projects", **bearer(viewer)).json()] == ["lab", "third"]


def test_the_owner_shares_an_experiment_and_takes_it_back_and_no_member_may(owner, viewer, editor, project,
                                                                               make_experiment):
    experiment = make_experiment(name="moved")
    url = f"/experiments/{experiment.pk}/project/"
    assert signed_in(viewer).get(f"/experiments/{experiment.pk}/").status_code == 404
    assert signed_in(owner).post(url, {"project": project.pk}).status_code == 302
    assert signed_in(viewer).get(f"/experiments/{experiment.pk}/").status_code == 200
    assert signed_in(editor).post(url, {"project": ""}).status_code == 403
    assert Experiment.objects.get(pk=experiment.pk).project == project
    elsewhere = Project.objects.create(name="not mine", owner=editor)
    signed_in(owner).post(url, {"project": elsewhere.pk})  # a project the owner cannot launch into: refused
    assert Experiment.objects.get(pk=experiment.pk).project == project
    signed_in(owner).post(url, {"project": ""})
    assert signed_in(viewer).get(f"/experiments/{experiment.pk}/").status_code == 404


def test_a_sweep_in_the_project_is_seen_by_a_viewer_who_cannot_cancel_extend_or_delete_it(owner, viewer, project):
    sweep = Sweep.objects.create(owner=owner, name="shared-sweep", algorithm="dqn", env_id="CartPole-v1",
                                 total_steps=400, eval_interval=200, project=project, space=[
                                     {"name": "learning_rate", "type": "float", "low": 1e-4, "high": 1e-2}])
    client = signed_in(viewer)
    assert client.get(f"/sweeps/{sweep.pk}/").status_code == 200
    assert b"shared-sweep" in body_of(client.get("/sweeps/"))
    for action in ("cancel", "extend", "delete", "launch-best"):
        assert client.post(f"/sweeps/{sweep.pk}/{action}/", {"more": 1, "seeds": 1}).status_code == 403, action
    assert Sweep.objects.get(pk=sweep.pk).status == "running"
    assert [row["name"] for row in Client().get("/api/sweeps", **bearer(viewer)).json()] == ["shared-sweep"]


def test_the_sweep_form_offers_only_the_projects_one_may_launch_into(owner, viewer, editor, project):
    assert list(SweepForm(owner=viewer).fields["project"].queryset) == []
    assert list(SweepForm(owner=editor).fields["project"].queryset) == [project]
    assert list(SweepForm(owner=owner).fields["project"].queryset) == [project]


def test_through_the_api_an_editor_launches_into_the_project_and_a_viewer_is_told_the_field(viewer, editor,
                                                                                           project):
    body = {"algorithm": "dqn", "env_id": "CartPole-v1", "total_steps": 400, "project": project.pk}
    refused = Client().post("/api/experiments", body, content_type="application/json", **bearer(viewer))
    assert refused.status_code == 422
    assert [error["loc"] for error in refused.json()["detail"]] == [["body", "project"]]
    created = Client().post("/api/experiments", body, content_type="application/json", **bearer(editor))
    assert created.status_code == 201 and created.json()["project_id"] == project.pk
    assert Experiment.objects.get(pk=created.json()["id"]).owner == editor


def test_a_viewers_pages_show_no_buttons_they_may_not_use_and_an_editors_do(viewer, editor, shared):
    queued, cancelled, experiment = shared["queued"], shared["cancelled"], shared["experiment"]
    Run.objects.filter(pk=queued.pk).update(status=Run.Status.RUNNING)  # the live-change form shows while it runs
    CheckpointJob.objects.create(checkpoint=shared["checkpoint"], kind=CheckpointJob.Kind.EVALUATE, episodes=1)
    controls = ['id="cancel-form"', 'id="live-change-form"', 'id="notes-form"']
    for user, shown in ((viewer, False), (editor, True)):
        client = signed_in(user)
        running = body_of(client.get(f"/runs/{queued.pk}/")).decode()
        assert all((control in running) is shown for control in controls), (user, shown)
        assert ('id="resume-form"' in body_of(client.get(f"/runs/{cancelled.pk}/")).decode()) is shown
        jobs = body_of(client.get(f"/runs/{shared['run'].pk}/jobs/")).decode()
        assert ('class="job-cancel"' in jobs) is shown
        trained = body_of(client.get(f"/runs/{shared['run'].pk}/")).decode()
        before_job_form = trained.split('id="checkpoint-job-form"')[0][-300:]
        assert ("<div hidden>" not in before_job_form) is shown  # the "Act on a checkpoint" form is hidden
        assert ('id="notes-form"' in body_of(client.get(f"/experiments/{experiment.pk}/")).decode()) is shown
