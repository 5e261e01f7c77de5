"""Devices and queues: the form's device choice routes runs to the gpu or cpu queue or to a named queue the admin
declares (settings.NAMED_QUEUES, from RLWEB_QUEUES); a queued run shows its place in its queue, and a notice when no
live worker serves that queue; the run list shows the host and device of each run."""

import base64
import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from rlweb.experiments import workers
from rlweb.experiments.models import Experiment, Run
from rlweb.settings import named_queues
from tests.web.helpers import form_data, register_idle_workers


def queued_message(live_redis, queue: str) -> tuple[str, list]:
    """The task id and arguments of the one message waiting in `queue`."""
    assert live_redis.llen(queue) == 1
    message = json.loads(live_redis.lindex(queue, 0))
    return message["headers"]["id"], json.loads(base64.b64decode(message["body"]))[0]


@pytest.mark.parametrize("device, queue", [("cpu", "cpu"), ("cuda", "gpu"), ("auto", "cpu"), ("a100", "a100"),
                                           ("host-a", "host-a")])
def test_each_device_choice_sends_the_run_to_its_queue(owner_client, live_redis, settings, device, queue,
                                                      django_capture_on_commit_callbacks):
    settings.NAMED_QUEUES = ["host-a", "a100"]
    register_idle_workers("cpu", "gpu", "host-a", "a100")
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(reverse("experiment-new"), form_data(device=device))
    assert response.status_code == 302
    run = Run.objects.get()
    assert run.experiment.device == device
    assert queued_message(live_redis, queue) == (run.task_id, [run.pk])
    others = {"cpu", "gpu", "host-a", "a100"} - {queue}
    assert all(live_redis.llen(other) == 0 for other in others)


def test_the_form_offers_the_declared_queues_as_devices(owner_client, settings):
    settings.NAMED_QUEUES = ["host-a", "a100"]
    html = owner_client.get(reverse("experiment-new")).content.decode()
    assert '<option value="host-a">queue host-a</option>' in html and '<option value="a100">queue a100</option>' in html


def test_the_form_refuses_a_queue_the_admin_did_not_declare(owner_client, live_redis, settings):
    settings.NAMED_QUEUES = ["host-a"]
    response = owner_client.post(reverse("experiment-new"), form_data(device="h100"))
    assert response.status_code == 200
    assert "device" in response.context["form"].errors
    assert not Experiment.objects.exists() and live_redis.llen("h100") == 0


def test_a_named_queue_run_asks_torch_for_whatever_its_worker_has(make_experiment):
    assert make_experiment(device="a100").torch_device == "auto"
    assert make_experiment(device="cuda").torch_device == "cuda"


def test_declared_queue_names_are_checked_at_startup(monkeypatch):
    monkeypatch.setenv("RLWEB_QUEUES", "host-a, a100,host-a")
    assert named_queues("RLWEB_QUEUES") == ["host-a", "a100"]
    for bad in ("gpu", "has space", "x" * 51, "-dash"):
        monkeypatch.setenv("RLWEB_QUEUES", bad)
        with pytest.raises(ImproperlyConfigured):
            named_queues("RLWEB_QUEUES")


def queue_runs(make_experiment, device: str, count: int) -> list[Run]:
    experiment = make_experiment(device=device)
    return [Run.objects.create(experiment=experiment, seed=seed, total_steps=400) for seed in range(count)]


def serve(*queues: str, node: str = "worker@host-b") -> None:
    workers.write_entry({"node": node, "host": "host-b", "queues": ",".join(queues), "pid": 1, "started": 0,
                         "device": "cpu", "gpu_memory_mb": 0, "visible_devices": ""})


def test_a_queued_run_shows_its_place_and_that_no_worker_serves_its_queue(owner_client, make_experiment, settings):
    settings.NAMED_QUEUES = ["a100"]
    queue_runs(make_experiment, "cpu", 1)  # another queue: not counted
    first, second, third = queue_runs(make_experiment, "a100", 3)
    Run.objects.filter(pk=first.pk).update(status=Run.Status.RUNNING)  # no longer waiting

    html = owner_client.get(reverse("run-detail", args=[third.pk])).content.decode()
    assert "#2 in queue <code>a100</code>" in html and "no worker serves this queue" in html

    serve("cpu", "a100")
    html = owner_client.get(reverse("run-detail", args=[third.pk])).content.decode()
    assert "#2 in queue <code>a100</code>" in html and "no worker serves this queue" not in html
    running = owner_client.get(reverse("run-detail", args=[first.pk])).content.decode()
    assert "in queue" not in running


def test_the_run_list_shows_queue_places_notices_and_each_runs_host_and_device(owner_client, make_experiment):
    cpu_run, = queue_runs(make_experiment, "cpu", 1)
    gpu_runs = queue_runs(make_experiment, "cuda", 2)
    trained, = queue_runs(make_experiment, "cpu", 1)
    Run.objects.filter(pk=trained.pk).update(status=Run.Status.SUCCEEDED, worker_host="host-b", device_used="cuda:0")
    serve("cpu")

    response = owner_client.get(reverse("run-list"))
    rows = {run.pk: run for run in response.context["page"]}
    assert (rows[cpu_run.pk].queue_place.queue, rows[cpu_run.pk].queue_place.position) == ("cpu", 1)
    assert rows[cpu_run.pk].queue_place.served
    assert [rows[run.pk].queue_place.position for run in gpu_runs] == [1, 2]
    assert not rows[gpu_runs[0].pk].queue_place.served and rows[trained.pk].queue_place is None
    html = response.content.decode()
    assert html.count("no worker serves this queue") == 2
    assert "host-b" in html and "cuda:0" in html


def test_strangers_runs_count_in_the_queue_but_their_pages_stay_hidden(owner_client, stranger, stranger_client,
                                                                       make_experiment):
    theirs, = queue_runs(lambda **fields: make_experiment(owner=stranger, **fields), "cpu", 1)
    mine, = queue_runs(make_experiment, "cpu", 1)
    assert "#2 in queue" in owner_client.get(reverse("run-detail", args=[mine.pk])).content.decode()
    assert owner_client.get(reverse("run-detail", args=[theirs.pk])).status_code == 404


def gpu_queue_worker(node: str, device: str) -> None:
    workers.write_entry({"node": node, "host": "host-c", "queues": "gpu", "pid": 1, "started": 0, "device": device,
                         "gpu_memory_mb": 0 if device == "cpu" else 81_920, "visible_devices": ""})


def test_cuda_is_refused_next_to_the_device_when_the_gpu_queues_workers_have_no_gpu(owner_client, live_redis):
    gpu_queue_worker("nogpu@host-c", "cpu")
    response = owner_client.post(reverse("experiment-new"), form_data(device="cuda"))
    assert response.status_code == 200 and not Experiment.objects.exists()
    message = response.context["form"].errors["device"][0]
    assert "nogpu@host-c" in message and "No worker of the gpu queue has a GPU" in message
    gpu_queue_worker("a100@host-c", "NVIDIA A100-SXM4-80GB")  # one GPU worker among them is enough
    assert owner_client.post(reverse("experiment-new"), form_data(device="cuda")).status_code == 302


def test_cuda_is_accepted_while_no_worker_serves_the_gpu_queue(owner_client, live_redis):
    """A queued run may wait for a GPU worker that starts later; the run page says no worker serves its queue."""
    assert owner_client.post(reverse("experiment-new"), form_data(device="cuda")).status_code == 302
