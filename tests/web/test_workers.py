"""The worker registry (workers.py) and the workers page: what a worker writes into Redis, its expiry, and who sees
what (signed-in users see every worker, the names of their own runs only; staff see everything)."""

import time

from django.test import Client
from django.urls import reverse

from rlweb.experiments import tasks, workers
from rlweb.experiments.models import Run


def test_a_worker_writes_its_entry_with_an_expiry_and_removes_it_when_it_stops(live_redis, settings):
    settings.WORKER_BEAT_SECONDS, settings.WORKER_TTL_SECONDS = 0.2, 5
    registration = workers.Registration("rlweb@host-a", ["gpu", "a100"]).start()
    try:
        entry = live_redis.hgetall("rlweb:worker:rlweb@host-a")
        assert entry["queues"] == "a100,gpu" and entry["device"] in ("cpu", workers.device_entry()["device"])
        assert 0 < live_redis.ttl("rlweb:worker:rlweb@host-a") <= 5
        first_beat = float(entry["heartbeat"])
        time.sleep(0.6)
        assert float(live_redis.hget("rlweb:worker:rlweb@host-a", "heartbeat")) > first_beat  # the thread beats
        worker, = workers.live_workers()
        assert (worker.node, worker.queues, worker.pid) == ("rlweb@host-a", ["a100", "gpu"], int(entry["pid"]))
    finally:
        registration.stop()
    assert not live_redis.exists("rlweb:worker:rlweb@host-a") and workers.live_workers() == []


def test_a_worker_that_stops_beating_expires(live_redis, settings):
    settings.WORKER_TTL_SECONDS = 1
    workers.write_entry(entry("killed@host-a", "cpu"))
    assert [worker.node for worker in workers.live_workers()] == ["killed@host-a"]
    time.sleep(1.5)
    assert workers.live_workers() == []


def test_the_worker_signals_register_and_unregister(live_redis):
    class Consumer:  # what Celery's worker_ready passes: the node name and the app, whose -Q queues are selected
        hostname = "signal@host-a"
        app = tasks.app

    tasks.register_worker(Consumer())
    try:
        assert live_redis.hget("rlweb:worker:signal@host-a", "queues")
    finally:
        tasks.unregister_worker(None)
    assert not live_redis.exists("rlweb:worker:signal@host-a")


def entry(node: str, queues: str, device: str = "cpu", memory: int = 0) -> dict:
    return {"node": node, "host": node.split("@")[1], "queues": queues, "pid": 4242, "started": time.time() - 3600,
            "device": device, "gpu_memory_mb": memory, "visible_devices": "1" if memory else ""}


def workers_with_a_run(owner, make_experiment):
    workers.write_entry(entry("gpu1@host-a", "gpu,a100", device="NVIDIA A100-SXM4-80GB", memory=81_920))
    workers.write_entry({**entry("cpu@host-b", "cpu"), "cores": 16})
    experiment = make_experiment(name="owner's secret sweep", device="cuda")
    return Run.objects.create(experiment=experiment, total_steps=400, status=Run.Status.RUNNING,
                              worker_node="gpu1@host-a", worker_host="host-a")


def test_the_workers_page_lists_each_live_worker_with_the_owners_run(owner, owner_client, make_experiment):
    run = workers_with_a_run(owner, make_experiment)
    response = owner_client.get(reverse("worker-list"))
    assert response.status_code == 200
    html = response.content.decode()
    for text in ("host-a", "host-b", "<code>gpu</code>, <code>a100</code>", "NVIDIA A100-SXM4-80GB", "81920 MB",
                 "1 h 00 min", "s ago", "owner&#x27;s secret sweep", f'href="{run.get_absolute_url()}"', "16 cores"):
        assert text in html, text
    assert html.count("idle") == 1
    assert "4242" not in html and "CUDA_VISIBLE_DEVICES" not in html  # staff only


def test_other_users_see_the_workers_but_not_the_name_of_the_run(owner, stranger_client, make_experiment):
    run = workers_with_a_run(owner, make_experiment)
    html = stranger_client.get(reverse("worker-list")).content.decode()
    assert "host-a" in html and "NVIDIA A100-SXM4-80GB" in html and "another user's run" in html
    assert "secret sweep" not in html and run.get_absolute_url() not in html


def test_staff_see_every_run_its_owner_and_the_workers_details(owner, make_experiment, django_user_model):
    workers_with_a_run(owner, make_experiment)
    admin = Client()
    admin.force_login(django_user_model.objects.create_user("admin", is_staff=True))
    html = admin.get(reverse("worker-list")).content.decode()
    assert "owner&#x27;s secret sweep" in html and "· owner" in html
    assert "gpu1@host-a / 4242" in html and "CUDA_VISIBLE_DEVICES=1" in html


def test_the_workers_page_needs_a_login_and_shows_queues_nobody_serves(client, owner_client, make_experiment):
    assert client.get(reverse("worker-list")).status_code == 302
    make_experiment(device="cuda").runs.create(total_steps=400)
    response = owner_client.get(reverse("worker-list"))
    assert response.context["queues"] == [{"name": "gpu", "queued": 1, "workers": 0}]
    assert "no worker serves this queue" in response.content.decode()
    assert "No live worker" in response.content.decode()
