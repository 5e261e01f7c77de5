"""Population-based training on the workers (rlweb/sweeps/pbt.py), below and through the pages: a population of 4
on CartPole whose runs the real task function trains (two threads: two workers), a member that copies another's
checkpoint at the ready point and goes on from the copied step with new settings (its events and checkpoint say
so), the lineage, a member lost with its worker that resumes, and a stranger who can neither see nor steer it."""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from trainer.checkpoint import read_checkpoint

from rlweb.experiments import lifecycle
from rlweb.experiments.models import Event, Experiment, Run
from rlweb.experiments.tasks import train_run
from rlweb.sweeps import pbt
from rlweb.sweeps.models import PbtCopy, Sweep, Trial
from tests.web.api_helpers import owner_api, stranger_api  # noqa: F401  (fixtures)
from tests.web.helpers import TINY_DQN

pytestmark = pytest.mark.django_db(transaction=True)

SEARCHED = {"learning_rate": (1e-4, 1e-2), "exploration_final_eps": (0.01, 0.2)}  # the ranges searched


def train_one(run_id: int) -> str:
    try:
        return train_run(run_id)
    finally:
        connection.close()


def work(sweep: Sweep, until, threads: int = 2, timeout: float = 240) -> None:
    """Be the workers: train the sweep's queued runs with the real task function, `threads` at once, until
    `until()` holds (no more runs are taken then) and no run trains here."""
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(threads) as pool:
        running: dict = {}
        while True:
            done = until()
            if done and not running:
                return
            assert time.monotonic() < deadline, list(Run.objects.values("pk", "status", "steps_done"))
            queued = (Run.objects.filter(experiment__sweep_trial__sweep=sweep, status=Run.Status.QUEUED)
                      .exclude(pk__in=running.values()).order_by("pk"))
            for run in [] if done else queued[:threads - len(running)]:
                running[pool.submit(train_one, run.pk)] = run.pk
            if running:
                finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in finished:
                    running.pop(future)
                    future.result()
            else:
                pbt.advance(sweep)
                time.sleep(0.1)


def start(owner_client, **fields) -> Sweep:
    data = {"name": "pbt", "algorithm": "dqn", "env_id": "CartPole-v1", "total_steps": "400", "eval_interval": "200",
            "eval_episodes": "2", "objective": "final", "last_evaluations": "1", "sampler": "random", "seed": "5",
            "pruner": "none", "trials": "4", "parallel": "1", "seeds_per_trial": "1", "device": "cpu",
            "method": "pbt", "ready_interval": "200", "quantile": "0.25", "resample_probability": "0",
            "preset": "none", "hp_learning_rate": "1e-4:1e-2:log", "hp_exploration_final_eps": "0.01:0.2",
            **{f"hp_{name}": str(value) for name, value in TINY_DQN.items()}, **fields}
    response = owner_client.post(reverse("sweep-new"), data)
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    return Sweep.objects.get()


def test_a_population_of_four_copies_and_perturbs_at_the_ready_point_and_the_copier_goes_on_from_there(
        owner_client, stranger_client):
    sweep = start(owner_client)
    assert sweep.is_pbt and sweep.trials == 4 and sweep.parallel == 4 and sweep.pruner == "none"
    members = list(sweep.trial_set.order_by("number"))
    assert len(members) == 4 and Run.objects.filter(status=Run.Status.QUEUED).count() == 4  # all at once
    assert sorted(Run.objects.values_list("seed", flat=True)) == [5, 6, 7, 8]  # each member its own seed

    def copied_and_the_copier_queued():
        return Run.objects.filter(experiment__sweep_trial__copies__isnull=False, status=Run.Status.QUEUED).exists()

    work(sweep, copied_and_the_copier_queued)
    copy = PbtCopy.objects.get()
    member_run = copy.member.experiment.runs.get()
    assert copy.step == 200 and copy.member != copy.donor
    assert copy.member_score <= copy.donor_score
    # explored: each value the donor's times 0.8 or 1.2, kept in its range (resample probability 0 here)
    for name, (low, high) in SEARCHED.items():
        assert any(copy.new[name] == pytest.approx(min(high, max(low, copy.donor_values[name] * factor)))
                   for factor in (0.8, 1.2)), (name, copy.new, copy.donor_values)
    # the copier's worker dies with it just claimed: the reaper finds it silent, and it resumes by itself, from the
    # copied checkpoint and with the change still to apply
    lost = member_run
    lost.refresh_from_db()
    assert lost.status == Run.Status.QUEUED
    assert lifecycle.claim(lost.pk, "celery@dead-host") is not None
    Run.objects.filter(pk=lost.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert lifecycle.reap_lost_runs() == 1
    lost.refresh_from_db()
    assert lost.status == Run.Status.QUEUED and lost.resume_requested

    # a stranger can neither see the population nor steer it
    for name in ("sweep-detail", "sweep-data", "sweep-figures"):
        assert stranger_client.get(reverse(name, args=[sweep.pk])).status_code == 404
    for name in ("sweep-cancel", "sweep-launch-best"):
        assert stranger_client.post(reverse(name, args=[sweep.pk]), {"seeds": "1"}).status_code == 404
    sweep.refresh_from_db()
    assert sweep.status == Sweep.Status.RUNNING

    work(sweep, lambda: Sweep.objects.get().status != Sweep.Status.RUNNING)
    sweep.refresh_from_db()
    assert sweep.status == Sweep.Status.FINISHED
    assert [trial.state for trial in sweep.trial_set.order_by("number")] == ["complete"] * 4
    assert all(run.status == Run.Status.SUCCEEDED and run.steps_done >= 400 for run in Run.objects.all())
    lost.refresh_from_db()
    assert lost.attempts == 3  # the first segment, the lost attempt, and the one that went on
    assert Event.objects.filter(run=lost, kind="resumed", values__interrupted="lost").exists()

    # the copier went on from the copied step with the new values: its events ...
    member_run.refresh_from_db()
    started = Event.objects.filter(run=member_run, kind="started").order_by("seq")
    assert [event.values["start_step"] for event in started] == [0, 200]
    change = Event.objects.get(run=member_run, kind="hyperparameters")
    assert change.step == 200
    assert {name: value["new"] for name, value in change.values["changes"].items()} == copy.new
    assert {name: value["old"] for name, value in change.values["changes"].items()} == copy.donor_values
    assert not Event.objects.filter(run=member_run, step__lt=200, seq__gt=change.seq).exclude(
        kind__in=["started", "resumed", "hyperparameters"]).exists()
    # ... and its checkpoints: the copied one at 200 with its own seed, and the final one with the new values
    copied = member_run.checkpoints.get(step=200, file__contains="from_run")
    config, _ = read_checkpoint(copied.file.path)
    assert config["seed"] == member_run.seed and config["step"] == 200
    donor_config, _ = read_checkpoint(member_run.checkpoints.get(tag="final").file.path)
    assert {name: donor_config["hyperparameters"][name] for name in SEARCHED} == copy.new
    member_run.refresh_from_db()
    assert member_run.live_changes[-1]["pbt"] == {"donor": copy.donor.number, "step": 200}

    # the page's data: the lineage, and the best member's whole schedule
    data = owner_client.get(reverse("sweep-data", args=[sweep.pk])).json()
    assert data["copies"] == [{"member": copy.member.number, "donor": copy.donor.number, "step": 200,
                               "member_score": copy.member_score, "donor_score": copy.donor_score,
                               "old": copy.old, "new": copy.new}]
    figures = owner_client.get(reverse("sweep-figures", args=[sweep.pk])).json()
    assert len(figures["curves"]["data"]) == 4 and len(figures["lineage"]["layout"]["annotations"]) == 1
    assert {trace["yaxis"] for trace in figures["schedules"]["data"]} == {"y", "y2"}
    assert owner_client.get(reverse("sweep-detail", args=[sweep.pk])).status_code == 200

    # the copier's whole schedule: the donor's first values up to the copy, then its own
    schedule = pbt.whole_schedule(sweep, copy.member.number)
    assert schedule == [(0, copy.donor.params), (200, copy.new)]


def test_the_best_members_schedule_launches_as_an_experiment_with_live_changes_from_step_0(owner, owner_client):
    sweep = Sweep.objects.create(owner=owner, name="pbt", algorithm="dqn", env_id="CartPole-v1", method="pbt",
                                 fixed=dict(TINY_DQN), total_steps=400, eval_interval=200, ready_interval=200,
                                 space=[{"name": "learning_rate", "type": "float", "low": 1e-4, "high": 1e-2,
                                         "log": True, "choices": []}], trials=2, parallel=2, device="cpu")
    first = Trial.objects.create(sweep=sweep, number=0, params={"learning_rate": 1e-3}, state="complete", value=10.0)
    best = Trial.objects.create(sweep=sweep, number=1, params={"learning_rate": 5e-3}, state="complete", value=50.0)
    PbtCopy.objects.create(sweep=sweep, member=best, donor=first, step=200, old={"learning_rate": 5e-3},
                           donor_values={"learning_rate": 1e-3}, new={"learning_rate": 1.2e-3})
    response = owner_client.post(reverse("sweep-launch-best", args=[sweep.pk]), {"seeds": "2"})
    experiment = Experiment.objects.get(sweep_trial__isnull=True)
    assert response.status_code == 302 and response.url == experiment.get_absolute_url()
    assert experiment.hyperparameters["learning_rate"] == 1e-3 and experiment.num_seeds == 2
    run = experiment.runs.first()
    assert [(entry["step"], entry["values"]) for entry in run.live_changes] == [(200, {"learning_rate": 1.2e-3})]
    assert train_run(run.pk) == "succeeded"
    change = Event.objects.get(run=run, kind="hyperparameters")
    assert change.step == 200 and change.values["changes"]["learning_rate"] == {"old": 1e-3, "new": 1.2e-3}
    run.refresh_from_db()
    config, _ = read_checkpoint(run.checkpoints.get(tag="final").file.path)
    assert config["hyperparameters"]["learning_rate"] == 1.2e-3


def test_the_form_refuses_a_setting_that_cannot_change_while_a_run_trains(owner_client):
    response = owner_client.post(reverse("sweep-new"), {
        "name": "pbt", "algorithm": "dqn", "env_id": "CartPole-v1", "total_steps": "400", "eval_interval": "200",
        "eval_episodes": "2", "objective": "final", "last_evaluations": "1", "sampler": "random", "seed": "0",
        "pruner": "none", "trials": "4", "parallel": "1", "seeds_per_trial": "1", "device": "cpu", "method": "pbt",
        "ready_interval": "300", "preset": "none", "hp_buffer_size": "1000:5000",
        **{f"hp_{name}": str(value) for name, value in TINY_DQN.items() if name != "buffer_size"}})
    assert response.status_code == 200 and not Sweep.objects.exists()
    errors = response.context["form"].errors
    assert "live" in errors["hp_buffer_size"][0]
    assert "multiple of the evaluation interval" in errors["ready_interval"][0]


def test_the_api_starts_a_population_with_the_forms_checks(owner, owner_api, stranger_api):
    body = {"name": "pbt", "algorithm": "dqn", "env_id": "CartPole-v1", "total_steps": 400, "eval_interval": 200,
            "eval_episodes": 1, "trials": 4, "device": "cpu", "method": "pbt", "ready_interval": 200,
            "hyperparameters": {"learning_rate": "1e-4:1e-2:log", "learning_starts": 50, "buffer_size": 1000}}
    refused = owner_api.post_json("/api/sweeps", {**body, "hyperparameters": {"buffer_size": "1000:5000"}})
    assert refused.status_code == 422
    assert ["body", "hyperparameters", "buffer_size"] in [error["loc"] for error in refused.json()["detail"]]
    response = owner_api.post_json("/api/sweeps", body)
    assert response.status_code == 201, response.content
    detail = response.json()
    assert detail["method"] == "pbt" and detail["parallel"] == 4 and detail["progress"]["copies"] == []
    assert Run.objects.filter(experiment__sweep_trial__sweep_id=detail["id"], status="queued").count() == 4
    assert stranger_api.get(f"/api/sweeps/{detail['id']}").status_code == 404


def test_a_cancelled_population_resumes_no_member_waiting_at_a_ready_point(owner_client):
    sweep = start(owner_client)
    waiting = sweep.trial_set.get(number=0)
    Run.objects.filter(experiment=waiting.experiment).update(status=Run.Status.CANCELLED, steps_done=200)
    Trial.objects.filter(pk=waiting.pk).update(ready_step=200)
    assert owner_client.post(reverse("sweep-cancel", args=[sweep.pk])).status_code == 302
    sweep.refresh_from_db()
    assert sweep.status == Sweep.Status.CANCELLED
    assert not Run.objects.filter(status__in=Run.ACTIVE).exists()
    trials = list(sweep.trial_set.order_by("number"))
    assert [trial.state for trial in trials] == ["failed"] * 4
    assert trials[0].reason == "the sweep was cancelled" and trials[0].steps == 200
