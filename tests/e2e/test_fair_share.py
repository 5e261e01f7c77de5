"""Fair share with real processes (redis-server, a Celery worker on a fresh SQLite database): one user queues three
tiny runs, then another user two; the only worker takes turns between them (owner, other, owner, other, owner)
instead of working through the first user's backlog, each run sent by the scheduler when the worker frees."""

from __future__ import annotations

import pytest

from tests.conftest import RedisServer
from tests.e2e.stack import Site
from tests.e2e.test_worker_kill import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUEUE_RUNS = """
from django.contrib.auth import get_user_model
from rlweb.experiments import lifecycle
from rlweb.experiments.models import Experiment
ids = []
for username, seeds in (("first-user", 3), ("second-user", 2)):
    owner = get_user_model().objects.create_user(username)
    experiment = Experiment.objects.create(
        owner=owner, name=f"{username}'s runs", algorithm="dqn", env_id="CartPole-v1", total_steps=200, device="cpu",
        num_seeds=seeds, eval_interval=0, eval_episodes=1,
        hyperparameters=dict(learning_starts=50, batch_size=16, buffer_size=1000, hidden_layers="16"))
    ids += [run.pk for run in lifecycle.launch(experiment)]
result = ids
"""

START_ORDER = """
from rlweb.experiments.models import Run
runs = Run.objects.order_by("first_started_at").values_list("experiment__owner__username", "status", "worker_node")
result = [list(run) for run in runs]
"""


def test_two_users_runs_take_turns_on_the_only_worker(tmp_path):
    redis_server = RedisServer().start()
    stack = Stack(tmp_path, redis_server.url)
    site = Site("", tmp_path, stack.env)
    try:
        run_ids = site.orm(QUEUE_RUNS)  # no worker yet: all five wait in the database
        assert [stack.run_row(run_id)["status"] for run_id in run_ids] == ["queued"] * 5
        stack.worker("only")
        for run_id in run_ids:
            stack.wait(run_id, lambda row: row["status"] == "succeeded", seconds=240)
        order = site.orm(START_ORDER)
        assert [username for username, _, _ in order] == ["first-user", "second-user", "first-user", "second-user",
                                                          "first-user"], order
        assert {node.split("@")[0] for _, _, node in order} == {"only"}
    finally:
        site.close()
        stack.stop()
        redis_server.stop()
