"""A logged run is not trained here: the API's trainer actions end it (cancel) or refuse it (resume, live changes,
409 naming why), a sweep cannot start around its experiment, and its runs take no room in the limit of queued
and running runs a user may launch (pages and API)."""

from __future__ import annotations

from django.urls import reverse

from rlweb.experiments.models import Experiment, Run
from rlweb.sweeps.models import Sweep
from rlweb.sweeps.study import room_for_runs
from tests.web.api_helpers import owner_api, stranger_api  # noqa: F401  (fixtures)
from tests.web.helpers import form_data
from tests.web.test_api_experiments import TINY
from tests.web.test_logged_runs import Api, point


def logged_run(owner) -> tuple[Api, int]:
    api = Api(owner)
    return api, api.create()


def test_cancel_through_the_api_ends_a_logged_run_at_once_and_its_script_hears_409(owner, owner_api):
    script, run_id = logged_run(owner)
    answer = owner_api.post(f"/api/runs/{run_id}/cancel")
    assert answer.status_code == 200 and answer.json() == {"outcome": "cancelled"}
    assert Run.objects.get(pk=run_id).status == Run.Status.CANCELLED
    assert script.points(run_id, [point(1, loss=1.0)]).status_code == 409
    assert owner_api.post(f"/api/runs/{run_id}/cancel").json() == {"outcome": "ended"}


def test_cancelling_a_logged_experiment_through_the_api_ends_its_running_runs(owner, owner_api):
    _, run_id = logged_run(owner)
    experiment_id = Run.objects.get(pk=run_id).experiment_id
    answer = owner_api.post(f"/api/experiments/{experiment_id}/cancel")
    assert answer.json() == {"cancelled": 1, "stopping": 0}
    assert Run.objects.get(pk=run_id).status == Run.Status.CANCELLED


def test_resume_and_live_changes_of_a_logged_run_through_the_api_are_refused_with_409(owner, owner_api):
    _, run_id = logged_run(owner)
    change = owner_api.post_json(f"/api/runs/{run_id}/hyperparameters", {"values": {"learning_rate": 0.1}})
    assert change.status_code == 409 and "logged from your own script" in change.json()["detail"]
    Run.objects.filter(pk=run_id).update(status=Run.Status.LOST)
    resume = owner_api.post(f"/api/runs/{run_id}/resume")
    assert resume.status_code == 409 and "logged from your own script" in resume.json()["detail"]
    assert Run.objects.get(pk=run_id).status == Run.Status.LOST  # not queued for a worker


def test_a_sweep_around_a_logged_experiment_is_refused_with_a_message(owner, owner_client):
    _, run_id = logged_run(owner)
    experiment = Run.objects.get(pk=run_id).experiment
    answer = owner_client.get(reverse("sweep-new") + f"?around={experiment.pk}", follow=True)
    assert answer.redirect_chain == [(experiment.get_absolute_url(), 302)]
    assert "logged from your own script" in [str(message) for message in answer.context["messages"]][0]
    assert not Sweep.objects.exists()


def test_running_logged_runs_take_no_room_in_the_limit_of_active_runs_on_the_page(owner, owner_client, settings):
    settings.MAX_ACTIVE_RUNS_PER_USER = 2
    for _ in range(3):
        logged_run(owner)
    assert owner_client.post(reverse("experiment-new"), form_data(num_seeds="2")).status_code == 302
    assert Run.objects.filter(status=Run.Status.QUEUED).count() == 2


def test_running_logged_runs_take_no_room_in_the_limit_of_active_runs_through_the_api(owner, owner_api, settings):
    settings.MAX_ACTIVE_RUNS_PER_USER = 2
    for _ in range(3):
        logged_run(owner)
    answer = owner_api.post_json("/api/experiments", {**TINY, "num_seeds": 2})
    assert answer.status_code == 201, answer.content
    assert Experiment.objects.get(pk=answer.json()["id"]).runs.count() == 2


def test_running_logged_runs_take_no_room_from_a_sweeps_next_trials(owner, make_experiment, settings):
    settings.MAX_ACTIVE_RUNS_PER_USER = 2
    for _ in range(3):
        logged_run(owner)
    assert Run.active_count(owner.pk) == 0
    sweep = Sweep(owner=owner, seeds_per_trial=2)
    assert room_for_runs(sweep)
    Run.objects.create(experiment=make_experiment(), total_steps=10)  # a queued run of the workers does count
    assert Run.active_count(owner.pk) == 1 and not room_for_runs(sweep)
