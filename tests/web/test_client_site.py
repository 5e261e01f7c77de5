"""rlweb_client.Site driving a live server as a notebook would: launch an experiment (refusals by field), its runs
trained by the real task function, wait for them, read their metrics and statistics."""

from __future__ import annotations

import json
import sys
import threading

import numpy as np
import pytest
import trainer
from django.db import connection

from rlweb.api.models import ApiToken
from rlweb.experiments.models import Run
from rlweb.experiments.redis_keys import changes_key, redis_client
from rlweb.experiments.tasks import train_run
from tests.web.helpers import TINY_DQN, TINY_STEPS
from tests.web.test_tensorboard_import import CLIENT

if str(CLIENT) not in sys.path:
    sys.path.insert(0, str(CLIENT))


@pytest.mark.django_db(transaction=True)
def test_a_notebook_launches_waits_for_and_reads_an_experiment(live_server, owner, capsys, tmp_path):
    import rlweb_client

    _, token = ApiToken.issue(owner, "notebook")
    site = rlweb_client.Site(live_server.url, token)
    with pytest.raises(rlweb_client.Refused) as refused:
        site.launch("dqn", "CartPole-v1", total_steps=TINY_STEPS, hyperparameters={"gamma": 7})
    assert refused.value.status == 422 and "gamma" in refused.value.detail

    experiment = site.launch("dqn", "CartPole-v1", total_steps=TINY_STEPS, num_seeds=2, name="from a notebook",
                             hyperparameters=TINY_DQN, eval_interval=200, eval_episodes=2, device="cpu")
    assert [run["status"] for run in site.runs(experiment=experiment["id"])] == ["queued", "queued"]
    with pytest.raises(TimeoutError, match="0 of 2 runs ended, 2 queued"):
        site.wait(experiment["id"], timeout=0.3, poll=0.1, progress=False)

    def train():  # the workers' part, by the real task function, while the notebook waits
        try:
            for run_id in experiment["run_ids"]:
                assert train_run(run_id) == "succeeded"
        finally:
            connection.close()  # this thread's own database connection

    worker = threading.Thread(target=train)
    worker.start()
    runs = site.wait(experiment["id"], timeout=120, poll=0.2)
    worker.join()
    assert sorted(run["id"] for run in runs) == sorted(experiment["run_ids"])
    assert {run["status"] for run in runs} == {"succeeded"} and all(run["eval_return_mean"] is not None for run in runs)
    said = capsys.readouterr().out.splitlines()  # a line each time where the runs stand changes, none twice
    assert all(line.startswith(f"experiment {experiment['id']}: ") for line in said) and len(said) == len(set(said))
    assert said[-1] == f"experiment {experiment['id']}: 2 of 2 runs ended", said
    metrics = site.metrics(runs[0]["id"])
    assert metrics["eval/return_mean"]["step"][-1] == TINY_STEPS
    assert Run.objects.get(pk=runs[0]["id"]).eval_return_mean == metrics["eval/return_mean"]["value"][-1]
    stats = site.statistics([run["id"] for run in runs])
    assert stats["state"] == "done" and stats["groups"] == ["dqn"] and len(stats["aggregates"]["dqn"]["iqm"]) == 3

    evaluations = site.events(runs[0]["id"], kinds="eval")  # every one, page after page
    assert [event["values"]["eval/return_mean"] for event in evaluations] == metrics["eval/return_mean"]["value"]
    final = next(item for item in site.checkpoints(runs[0]["id"]) if item["tag"] == "final")
    path = site.download(final, tmp_path / "downloads")
    assert path.parent == tmp_path / "downloads" and path.suffix == ".zip" and not list(path.parent.glob("*.part"))
    agent = trainer.load(str(path))  # evaluated here, as a notebook would
    assert agent.predict(np.zeros(4, dtype=np.float32)) in (0, 1)
    assert site.download(final, tmp_path, name="best.zip").read_bytes() == path.read_bytes()

    assert site.cancel(runs[0]["id"]) == "ended"
    with pytest.raises(rlweb_client.Refused, match="cancelled or lost") as refused:
        site.resume(runs[0]["id"])
    assert refused.value.status == 409
    with pytest.raises(rlweb_client.Refused, match="Only a running run") as refused:
        site.change(runs[0]["id"], learning_rate=0.0005)
    assert refused.value.status == 409


@pytest.mark.django_db(transaction=True)
def test_a_notebook_steers_a_running_run_and_cancels_a_queued_one(live_server, owner, make_experiment):
    import rlweb_client

    _, token = ApiToken.issue(owner, "notebook")
    site = rlweb_client.Site(live_server.url, token)
    running, queued = (Run.objects.create(experiment=make_experiment(), total_steps=TINY_STEPS, status=status)
                       for status in (Run.Status.RUNNING, Run.Status.QUEUED))
    change = site.change(running.pk, learning_rate=0.0005)
    assert change["values"] == {"learning_rate": 0.0005}
    for_its_worker = json.loads(redis_client().lpop(changes_key(running.pk)))
    assert for_its_worker["values"] == {"learning_rate": 0.0005}
    with pytest.raises(rlweb_client.Refused) as refused:
        site.change(running.pk, learning_rate=-1)
    assert refused.value.status == 422 and "learning_rate" in refused.value.detail
    assert site.cancel(queued.pk) == "cancelled"
    assert Run.objects.get(pk=queued.pk).status == Run.Status.CANCELLED
