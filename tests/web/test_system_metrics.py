"""System metrics (trainer/system_metrics.py) in the web app: a run trained by the real task sends them through its
sink into Event rows, the Redis stream and the charts' summary, so the run page and the compare page draw them;
and each worker's registry entry carries its load, which the workers page shows."""

import json
import time

from django.template.defaultfilters import floatformat
from django.urls import reverse

from rlweb.experiments import redis_keys, workers
from rlweb.experiments.models import Event, Run
from rlweb.experiments.tasks import train_run
from tests.web.api_helpers import owner_api  # noqa: F401  (fixture)
from tests.web.helpers import TINY_STEPS
from trainer import runner as runner_module
from trainer import system_metrics

PROCESS_KEYS = {"system/cpu_percent", "system/rss_mb", "system/machine_memory_percent",
                "system/machine_memory_used_mb"}
SPLIT_KEYS = {"system/acting_percent", "system/env_percent", "system/update_percent", "system/other_percent"}


def test_a_trained_run_sends_system_metrics_to_its_events_its_stream_and_both_pages_charts(
        make_experiment, owner_client, live_redis, monkeypatch):
    monkeypatch.setenv(system_metrics.INTERVAL_VARIABLE, "0.02")
    monkeypatch.setattr(runner_module, "TIME_EVENT_SECONDS", 0.02)
    run = Run.objects.create(experiment=make_experiment(), seed=0, total_steps=TINY_STEPS)
    assert train_run(run.pk) == "succeeded"

    samples = [event for event in Event.objects.filter(run=run, kind="time") if "system/rss_mb" in event.values]
    assert samples, "a run of a few tenths of a second, sampled every 0.02 s"
    for event in samples:
        assert PROCESS_KEYS | SPLIT_KEYS <= set(event.values)
        assert event.values["system/rss_mb"] > 50 and 0 < event.values["system/machine_memory_percent"] < 100
    streamed = [json.loads(fields["event"]) for _, fields in live_redis.xrange(redis_keys.stream_key(run.pk))]
    assert [event.as_dict() for event in samples] == [event for event in streamed if "system/rss_mb" in event["values"]]

    # the run page's history and the compare page's data have a chart of each (their pages group system/ keys)
    metrics = owner_client.get(reverse("run-history", args=[run.pk])).json()["metrics"]
    assert PROCESS_KEYS | SPLIT_KEYS <= set(metrics)
    assert metrics["system/rss_mb"]["value"][-1] == samples[-1].values["system/rss_mb"]
    compared = owner_client.get(reverse("compare-data"), {"runs": str(run.pk)}).json()["metrics"]
    assert PROCESS_KEYS <= {metric["key"] for metric in compared}
    keys = [metric["key"] for metric in compared]
    assert keys.index("rollout/episode_return") < min(keys.index(key) for key in PROCESS_KEYS)


def entry(node: str, **load) -> dict:
    return {"node": node, "host": node.split("@")[1], "queues": "gpu", "pid": 4242, "started": time.time() - 60,
            "device": "NVIDIA H100", "gpu_memory_mb": 81_559, "visible_devices": "",
            **({"load": json.dumps(load)} if load else {})}


def test_a_worker_beats_with_its_load_and_the_workers_page_shows_it(owner_client, live_redis, settings):
    settings.WORKER_BEAT_SECONDS, settings.WORKER_TTL_SECONDS = 0.2, 5
    registration = workers.Registration("rlweb@host-a", ["cpu"]).start()
    try:
        first = json.loads(live_redis.hget("rlweb:worker:rlweb@host-a", "load"))
        held = bytearray(48 * 2**20)  # the worker's memory grows: a later beat says so
        held[::4096] = b"x" * len(held[::4096])
        assert PROCESS_KEYS <= set(first) and first["system/cpu_percent"] >= 0
        deadline = time.monotonic() + 10
        while json.loads(live_redis.hget("rlweb:worker:rlweb@host-a", "load"))["system/rss_mb"] \
                < first["system/rss_mb"] + 40:
            assert time.monotonic() < deadline, "the beat did not sample the load again"
            time.sleep(0.1)
        settings.WORKER_BEAT_SECONDS = 60  # one more beat at most: then the page and the entry hold one load
        while True:
            load = live_redis.hget("rlweb:worker:rlweb@host-a", "load")
            html = owner_client.get(reverse("worker-list")).content.decode()
            if live_redis.hget("rlweb:worker:rlweb@host-a", "load") == load:
                break
        shown = {key: floatformat(value, 0) for key, value in json.loads(load).items()}  # as the template rounds
        assert f"CPU {shown['system/cpu_percent']}% · {shown['system/rss_mb']} MB" in html
        assert f"machine memory {shown['system/machine_memory_percent']}%" in html
        del held
    finally:
        registration.stop()


def test_the_workers_page_shows_each_gpus_load_and_a_dash_for_a_worker_that_says_none(owner_client):
    workers.write_entry(entry("gpu@host-a", **{"system/cpu_percent": 98.6, "system/rss_mb": 2048.4,
                                               "system/machine_memory_percent": 41.2,
                                               "system/gpu0_utilization": 87.0, "system/gpu0_memory_mb": 40960.0,
                                               "system/gpu1_memory_mb": 512.0}))
    workers.write_entry(entry("old@host-b"))  # started before workers said their load
    html = owner_client.get(reverse("worker-list")).content.decode()
    gpu_row = html[html.index('data-node="gpu@host-a"'):html.index('data-node="old@host-b"')]
    assert "CPU 99% · 2048 MB" in gpu_row and "machine memory 41%" in gpu_row
    assert "GPU 0: 87% busy · 40960 MB" in gpu_row and "GPU 1: 512 MB" in gpu_row
    old_row = html[html.index('data-node="old@host-b"'):]
    assert '<td class="worker-load"><span class="muted">–</span>' in old_row and "CPU " not in old_row


def test_the_api_gives_each_workers_load(owner_api):  # noqa: F811
    load = {"system/cpu_percent": 12.5, "system/rss_mb": 300.0, "system/machine_memory_percent": 40.0}
    workers.write_entry(entry("gpu@host-a", **load))
    workers.write_entry(entry("old@host-b"))
    answer = owner_api.get("/api/workers").json()
    assert [(worker["node"], worker["load"]) for worker in answer] == [("gpu@host-a", load), ("old@host-b", {})]
