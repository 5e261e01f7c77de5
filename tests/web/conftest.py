"""The base of every web test: a real Redis (flushed), media in a temporary folder, an owner and a
stranger with their logged-in clients, and ways to make experiments and trained runs."""

from __future__ import annotations

import pytest
from django.test import Client

from rlweb.experiments.models import Experiment, Run
from rlweb.experiments.tasks import train_run
from tests.web.helpers import PASSWORD, TINY_DQN, TINY_STEPS

@pytest.fixture(autouse=True)
def web_environment(db, live_redis, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return live_redis


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user("owner", password=PASSWORD)


@pytest.fixture
def stranger(django_user_model):
    return django_user_model.objects.create_user("stranger", password=PASSWORD)


@pytest.fixture
def owner_client(owner):
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def stranger_client(stranger):
    client = Client()
    client.force_login(stranger)
    return client


@pytest.fixture
def make_experiment(owner):
    def make(**fields) -> Experiment:
        values = {"owner": owner, "name": "tiny", "algorithm": "dqn", "env_id": "CartPole-v1",
                  "hyperparameters": dict(TINY_DQN), "total_steps": TINY_STEPS, "eval_interval": 200,
                  "eval_episodes": 2, "checkpoint_interval": 0, "num_seeds": 1, "device": "cpu"}
        values.update(fields)
        return Experiment.objects.create(**values)

    return make


@pytest.fixture
def queued_run(make_experiment) -> Run:
    experiment = make_experiment()
    return Run.objects.create(experiment=experiment, seed=0, total_steps=experiment.total_steps, task_id="test-task")


@pytest.fixture
def trained_run(queued_run) -> Run:
    """A run trained by the real task function, in this process."""
    assert train_run(queued_run.pk) == "succeeded"
    queued_run.refresh_from_db()
    return queued_run
