"""A run for a queue nobody serves, with real processes (redis-server, Celery workers on a fresh SQLite database):
it stays queued with the notice "no worker serves this queue" while only a worker for another queue is up, and it
starts once a worker for its queue appears (Celery delivers the waiting message to the new consumer)."""

from __future__ import annotations

import pytest

from tests.conftest import RedisServer
from tests.e2e.stack import Site, wait_until
from tests.e2e.test_worker_kill import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MAKE_RUN = """
from django.contrib.auth import get_user_model
from rlweb.experiments import lifecycle
from rlweb.experiments.models import Experiment
owner = get_user_model().objects.create_user("queue-owner")
experiment = Experiment.objects.create(
    owner=owner, name="waits for a100", algorithm="dqn", env_id="CartPole-v1", total_steps=300, device="a100",
    eval_interval=0, eval_episodes=1, hyperparameters=dict(learning_starts=50, batch_size=16, buffer_size=1000,
                                                           hidden_layers="16"))
result = [run.pk for run in lifecycle.launch(experiment)][0]
"""

RUN_PAGE = """
from django.contrib.auth import get_user_model
from django.test import Client
from rlweb.experiments import workers
client = Client()
client.force_login(get_user_model().objects.get(username="queue-owner"))
page = client.get("/runs/{run_id}/", HTTP_HOST="localhost").content.decode()
result = dict(notice="no worker serves this queue" in page, place="#1 in queue <code>a100</code>" in page,
              workers=sorted(worker.node for worker in workers.live_workers()))
"""


def test_a_run_waits_with_a_notice_until_a_worker_for_its_queue_starts(tmp_path):
    redis_server = RedisServer().start()
    stack = Stack(tmp_path, redis_server.url)
    stack.env["RLWEB_QUEUES"] = "a100"
    site = Site("", tmp_path, stack.env)
    try:
        run_id = site.orm(MAKE_RUN)
        stack.start("cpu-worker", "worker", "--pool", "solo", "-Q", "cpu", "-n", "cpu@%h", "--without-gossip",
                    "--without-mingle")
        page = page_once(site, run_id, lambda page: page["workers"], seconds=120)
        assert page["notice"] and page["place"], page  # a worker is up, but none serves a100
        assert stack.run_row(run_id)["status"] == "queued"

        stack.start("a100-worker", "worker", "--pool", "solo", "-Q", "a100", "-n", "a100@%h", "--without-gossip",
                    "--without-mingle")
        stack.wait(run_id, lambda row: row["status"] == "succeeded", seconds=180)
        page = site.orm(RUN_PAGE.format(run_id=run_id))
        assert not page["notice"] and not page["place"] and len(page["workers"]) == 2
        node = site.orm(f"from rlweb.experiments.models import Run\nresult = Run.objects.get(pk={run_id}).worker_node")
        assert node.startswith("a100@")
    finally:
        site.close()
        stack.stop()
        redis_server.remove()


def page_once(site: Site, run_id: int, condition, seconds: float) -> dict:
    """What the run's page says (RUN_PAGE) once `condition` holds for it."""
    def reached():
        page = site.orm(RUN_PAGE.format(run_id=run_id))
        return page if condition(page) else None
    return wait_until(reached, seconds, f"the page of run {run_id} did not say so", interval=1,
                      context=lambda: site.orm(RUN_PAGE.format(run_id=run_id)))
