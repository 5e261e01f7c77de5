"""The API's sweeps (create with the form's validation, read, list) and the workers and queues."""

from __future__ import annotations

import time

import pytest

from rlweb.experiments import workers
from rlweb.experiments.models import Run
from rlweb.sweeps.models import Sweep
from tests.web.api_helpers import owner_api, stranger_api  # noqa: F401  (fixtures)
from tests.web.helpers import TINY_STEPS

pytestmark = pytest.mark.django_db(transaction=True)  # Optuna writes through its own connection

SWEEP = {"name": "lr sweep", "algorithm": "dqn", "env_id": "CartPole-v1", "total_steps": TINY_STEPS,
         "eval_interval": 200, "eval_episodes": 1, "trials": 2, "parallel": 1, "sampler": "random", "pruner": "none",
         "device": "cpu", "hyperparameters": {"learning_rate": "1e-4:1e-2:log", "batch_size": "16|32",
                                              "learning_starts": 50, "buffer_size": 1000}}


def test_create_starts_a_sweep_and_reads_it_back(owner, owner_api):
    response = owner_api.post_json("/api/sweeps", SWEEP)
    assert response.status_code == 201, response.content
    sweep = Sweep.objects.get(pk=response.json()["id"], owner=owner)
    assert {item["name"] for item in sweep.space} == {"learning_rate", "batch_size"}
    assert str(sweep.fixed["learning_starts"]) == "50"  # kept as the form keeps it
    assert Run.objects.filter(experiment__sweep_trial__sweep=sweep).count() == 1  # parallel 1: one trial started
    detail = owner_api.get(f"/api/sweeps/{sweep.pk}").json()
    assert detail["progress"]["trials_total"] == 2 and len(detail["progress"]["trials"]) == 1
    assert [item["id"] for item in owner_api.get("/api/sweeps").json()] == [sweep.pk]


def test_a_bad_range_is_refused_by_field(owner_api):
    response = owner_api.post_json("/api/sweeps", {**SWEEP, "hyperparameters": {"learning_rate": "5:1"},
                                                   "trials": 0})
    assert response.status_code == 422
    locs = [error["loc"] for error in response.json()["detail"]]
    assert ["body", "hyperparameters", "learning_rate"] in locs and ["body", "trials"] in locs
    assert owner_api.post_json("/api/sweeps", {**SWEEP, "hyperparameters": {"nope": 1}}).status_code == 422
    assert owner_api.post_json("/api/sweeps", {**SWEEP, "speed": "fast"}).status_code == 422
    assert not Sweep.objects.exists()


def test_a_stranger_gets_404_on_a_sweep(owner_api, stranger_api):
    sweep_id = owner_api.post_json("/api/sweeps", SWEEP).json()["id"]
    assert stranger_api.get(f"/api/sweeps/{sweep_id}").status_code == 404
    assert stranger_api.get("/api/sweeps").json() == []


def test_workers_and_queues_show_the_registry_and_only_ones_own_run(owner_api, stranger_api, queued_run):
    workers.write_entry({"node": "w1@host", "host": "host", "queues": "cpu", "pid": 1, "started": time.time() - 60,
                         "device": "cpu", "gpu_memory_mb": 0, "visible_devices": "", "cores": 2})
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING, worker_node="w1@host")
    Run.objects.create(experiment=queued_run.experiment, seed=1, total_steps=400)  # queued on cpu
    mine = owner_api.get("/api/workers").json()
    assert [(worker["node"], worker["run_id"]) for worker in mine] == [("w1@host", queued_run.pk)]
    assert stranger_api.get("/api/workers").json()[0]["run_id"] is None
    assert owner_api.get("/api/queues").json() == [{"name": "cpu", "queued": 1, "workers": 1}]
