"""The base of every web test: a real Redis (flushed), media in a temporary folder, an owner and a
stranger with their logged-in clients, and ways to make experiments and trained runs; for the storage tests,
a bucket of a real S3-protocol server (`s3_bucket`)."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from rlweb import settings as rlweb_settings
from rlweb.experiments.models import Experiment, Run
from rlweb.experiments.tasks import train_run
from tests.web.helpers import PASSWORD, TINY_DQN, TINY_STEPS
from tests.web.s3 import MotoServer

@pytest.fixture(autouse=True)
def web_environment(db, live_redis, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    # Django's advice for test suites: a fast hasher. The site's (PBKDF2, 1,000,000 rounds) takes 0.19 s a password,
    # and most tests make an owner and a stranger: a third of the web suite's time went to it. No test is about the
    # hash; a sign-in still checks the password against it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # the heartbeat thread has its own connection, which the test's open transaction would hold up: the tests
    # that need it (tests/web/test_heartbeat.py) use a transactional database and set a short beat
    settings.HEARTBEAT_SECONDS = 3600
    return live_redis


@pytest.fixture(scope="session", autouse=True)
def sweep_storages(django_db_setup):
    """The sweeps' Optuna storages hold connections of their own: closed at the end, so that the test database
    can be dropped."""
    yield
    from rlweb.sweeps.study import close_storages

    close_storages()


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-protocol server (moto's standalone server, a process of its own) for the session."""
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, settings, monkeypatch):
    """Checkpoints and videos go to a new bucket of the test's S3 server: STORAGES as rlweb's settings build it
    from the RLWEB_S3_* variables. Returns the bucket (boto3) for the test to look into."""
    name = f"rlweb-{uuid.uuid4().hex[:12]}"
    bucket = s3_server.bucket(name)
    for variable, value in s3_server.environment(name).items():
        monkeypatch.setenv(variable, value)
    settings.STORAGES = {**settings.STORAGES, "default": rlweb_settings.media_storage()}
    return bucket


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
