"""The new-experiment form refuses more `processes` than the chosen queue's workers have cores (issue 27: processes=8 on
a 2-core worker took 42 s to start and as long to cancel). Workers report their cores in the registry (workers.py);
while no worker of the queue is known, the form refuses nothing: a worker may start later."""

import time

import trainer
from django.urls import reverse

from rlweb.experiments import workers
from rlweb.experiments.models import Experiment
from tests.web.helpers import form_data


def ppo_data(processes: int, device: str = "cpu") -> dict:
    data = {key: value for key, value in form_data(algorithm="ppo", device=device).items()
            if not key.startswith("hp_")}
    data.update({f"hp_{param.name}": str(param.default) for param in trainer.get_spec("ppo").params()})
    return {**data, "hp_hidden_layers": "16", "hp_processes": str(processes)}  # 8 envs, batches of 256: split by 4


def a_worker(node: str, queues: str, cores: int | None) -> None:
    workers.write_entry({"node": node, "host": node.split("@")[1], "queues": queues, "pid": 4242,
                         "started": time.time(), "device": "cpu", "gpu_memory_mb": 0, "visible_devices": "",
                         **({"cores": cores} if cores else {})})


def post(client, data):
    return client.post(reverse("experiment-new"), data)


def test_processes_above_the_queues_cores_are_refused_with_the_number(owner_client, live_redis):
    a_worker("small@host-a", "cpu", cores=2)
    a_worker("gpu@host-b", "gpu", cores=64)  # another queue's cores do not count
    response = post(owner_client, ppo_data(processes=4))
    assert response.status_code == 200 and not Experiment.objects.exists()
    errors = response.context["form"].errors["hp_processes"]
    assert errors == ["must be at most 2: the workers of queue cpu have at most 2 cores, and all of a run's processes "
                      "train on the one worker that takes it. More processes than cores only wait for each other: "
                      "slower to start, to train and to cancel."]


def test_processes_within_the_biggest_workers_cores_are_accepted(owner_client, live_redis):
    a_worker("small@host-a", "cpu", cores=2)
    a_worker("big@host-c", "cpu", cores=4)  # a run may be taken by either: the biggest one bounds it
    response = post(owner_client, ppo_data(processes=4))
    assert response.status_code == 302, response.context["form"].errors
    assert Experiment.objects.get().hyperparameters["processes"] == 4


def test_processes_are_not_refused_while_no_worker_of_the_queue_is_known(owner_client, live_redis):
    assert post(owner_client, ppo_data(processes=8)).status_code == 302  # no worker at all yet
    a_worker("old@host-a", "cpu", cores=None)  # a worker started before workers reported their cores
    a_worker("gpu@host-b", "gpu", cores=2)
    assert post(owner_client, ppo_data(processes=4)).status_code == 302


def test_a_worker_reports_the_cores_it_may_use(live_redis):
    registration = workers.Registration("cores@host-a", ["cpu"]).start()
    try:
        worker, = workers.live_workers()
        assert worker.cores == workers.device_entry()["cores"] >= 1
        assert workers.most_cores("cpu") == worker.cores and workers.most_cores("gpu") is None
    finally:
        registration.stop()
