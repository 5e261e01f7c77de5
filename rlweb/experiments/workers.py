"""The worker registry: every Celery worker writes itself into Redis; the workers page and the queue notices read it.

A worker keeps one hash, `rlweb:worker:<node name>`: its host, queues, device (the GPU's name and memory when torch
sees one), the cores it may use, pid, start time, last heartbeat, and its load at that beat (`load`: the system
metrics a run sends, trainer/system_metrics.py, sampled by the beating thread for the whole worker process).
When the worker is ready (Celery's `worker_ready` signal) a daemon thread writes the hash and then rewrites it
every `WORKER_BEAT_SECONDS`, each time with an expiry of `WORKER_TTL_SECONDS`; `worker_shutdown` deletes it. The thread beats while the solo pool's main
thread trains (as a run's heartbeat does), and a Redis restart loses nothing for long: the next beat writes the
whole hash again. A worker killed outright stops beating and its hash expires, so the registry holds exactly the
workers heard from within the TTL, read with one SCAN and no broadcast (`celery inspect` waits for every worker's
answer, and a solo worker that trains answers late or never). Which run a worker trains is read from the database
(`Run.worker_node`), which holds the truth about runs.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field

import redis
from django.conf import settings
from trainer.system_metrics import SystemSampler

from rlweb.experiments import redis_keys

logger = logging.getLogger(__name__)

KEY_PREFIX = "rlweb:worker:"
BUILTIN_PACKAGE = "rlweb"  # trainer.registry.BUILTIN_PACKAGE: the package of the algorithms that are not plugins


def registry_key(node: str) -> str:
    return KEY_PREFIX + node


@dataclass
class Worker:
    """A live worker as its registry entry describes it; `run` is set by the page (None: idle)."""

    node: str
    host: str
    queues: list[str]
    device: str  # "cpu", or the GPU's name
    gpu_memory_mb: int | None
    visible_devices: str  # CUDA_VISIBLE_DEVICES as the worker was started with it ("" when unset)
    pid: int
    started: float
    heartbeat: float
    cores: int | None = None  # the CPU cores it may use (None: a worker started before workers said)
    # {algorithm: "package version"} it can train, and {algorithm: "package version: error"} of its broken plugins
    # (None: a worker started before workers said, taken to have every algorithm)
    algorithms: dict[str, str] | None = None
    broken_algorithms: dict[str, str] = field(default_factory=dict)
    # its load at the last beat: {"system/cpu_percent": ..., ...} (trainer/system_metrics.py); {}: not said
    load: dict[str, float] = field(default_factory=dict)
    run: object = field(default=None)

    @classmethod
    def from_entry(cls, entry: dict) -> Worker:
        return cls(node=entry["node"], host=entry["host"], queues=[q for q in entry["queues"].split(",") if q],
                   device=entry["device"], gpu_memory_mb=int(entry["gpu_memory_mb"]) or None,
                   visible_devices=entry.get("visible_devices", ""), pid=int(entry["pid"]),
                   started=float(entry["started"]), heartbeat=float(entry["heartbeat"]),
                   cores=int(entry.get("cores") or 0) or None,
                   algorithms=json.loads(entry["algorithms"]) if entry.get("algorithms") else None,
                   broken_algorithms=json.loads(entry.get("broken_algorithms") or "{}"),
                   load=json.loads(entry.get("load") or "{}"))

    @property
    def plugins(self) -> dict[str, str]:
        """{algorithm: "package version"} of the algorithms it has from packages other than rlweb."""
        return {name: origin for name, origin in (self.algorithms or {}).items()
                if not origin.startswith(BUILTIN_PACKAGE + " ")}

    def has_algorithm(self, name: str, origin: str) -> bool:
        """Whether it can train `name` as it comes from `origin` ("package version") where the run is made."""
        return self.algorithms is None or self.algorithms.get(name) == origin

    @property
    def shown_load(self) -> dict | None:
        """Its load at the last beat as the workers page shows it: CPU percent, resident and machine memory, and each
        GPU's utilisation and memory; None when its entry has none (a worker started before workers said)."""
        load = self.load
        if "system/cpu_percent" not in load:
            return None
        gpus = []
        while f"system/gpu{len(gpus)}_memory_mb" in load:
            prefix = f"system/gpu{len(gpus)}_"
            gpus.append({"index": len(gpus), "utilization": load.get(prefix + "utilization"),
                         "memory_mb": load[prefix + "memory_mb"]})
        return {"cpu_percent": load["system/cpu_percent"], "rss_mb": load.get("system/rss_mb"),
                "machine_memory_percent": load.get("system/machine_memory_percent"), "gpus": gpus}

    @property
    def uptime_seconds(self) -> float:
        return max(0.0, time.time() - self.started)

    @property
    def heartbeat_age_seconds(self) -> float:
        return max(0.0, time.time() - self.heartbeat)


def device_entry() -> dict:
    """The device this worker trains on: the first GPU torch sees (CUDA_VISIBLE_DEVICES picks it), else the CPU;
    and the cores it may use (its CPU affinity), which bound a run's `processes` (`most_cores`)."""
    import torch
    from trainer.distributed import usable_cores

    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        device, memory = properties.name, properties.total_memory // 2**20
    else:
        device, memory = "cpu", 0
    return {"device": device, "gpu_memory_mb": memory, "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "cores": usable_cores(), **algorithms_entry()}


def algorithms_entry() -> dict:
    """The algorithms this process has, with the package and version each comes from, and its broken plugins."""
    import trainer

    return {"algorithms": json.dumps({name: str(trainer.origin(name)) for name in trainer.algorithm_names()}),
            "broken_algorithms": json.dumps({broken.name: f"{broken.origin}: {broken.error}"
                                             for broken in trainer.broken_algorithms()})}


def offered_algorithms(queue: str | None = None, live: list[Worker] | None = None) -> set[str] | None:
    """The algorithms, as this host has them (the same package and version), that some live worker (of `queue`) has;
    None while no such worker is known (all are offered: a run waits for a worker that starts later)."""
    import trainer

    serving = [worker for worker in (live_workers() if live is None else live) if queue is None or queue in worker.queues]
    if not serving:
        return None
    return {name for name in trainer.algorithm_names()
            if any(worker.has_algorithm(name, str(trainer.origin(name))) for worker in serving)}


def write_entry(entry: dict) -> None:
    """Write a worker's entry with a fresh heartbeat and expiry (one transaction)."""
    key = registry_key(entry["node"])
    with redis_keys.redis_client().pipeline() as pipe:
        pipe.hset(key, mapping={**entry, "heartbeat": time.time()})
        pipe.expire(key, settings.WORKER_TTL_SECONDS)
        pipe.execute()


def live_workers() -> list[Worker]:
    """Every worker whose entry has not expired, by host and node; none when Redis cannot be reached."""
    client = redis_keys.redis_client()
    try:
        entries = [client.hgetall(key) for key in client.scan_iter(match=KEY_PREFIX + "*", count=500)]
    except redis.RedisError as error:
        logger.warning("cannot read the worker registry (%s)", error)
        return []
    workers = [Worker.from_entry(entry) for entry in entries if entry.get("node")]  # {}: expired since the SCAN
    return sorted(workers, key=lambda worker: (worker.host, worker.node))


def served_queues(workers: list[Worker]) -> set[str]:
    return {queue for worker in workers for queue in worker.queues}


def jobs_worker_expected() -> bool:
    """Whether the deployment runs a jobs worker (settings.JOBS_WORKER_DEPLOYED) or a live worker serves the jobs
    queue now. A deployed jobs worker missing from the registry for a moment (a restart, a late beat on a loaded
    host) then delays the work a little instead of sending it behind a training run."""
    return settings.JOBS_WORKER_DEPLOYED or settings.JOBS_QUEUE in served_queues(live_workers())


def jobs_queue_or(fallback: str) -> str:
    """The jobs queue where a jobs worker is expected, else `fallback`."""
    return settings.JOBS_QUEUE if jobs_worker_expected() else fallback


def most_cores(queue: str, live: list[Worker] | None = None) -> int | None:
    """The most cores a live worker of `queue` may use: a run's processes all train on the one worker that takes it.
    None when no worker of the queue is known, or none of them says (started before workers did)."""
    cores = [worker.cores for worker in (live_workers() if live is None else live)
             if queue in worker.queues and worker.cores]
    return max(cores, default=None)


class Registration:
    """A worker's entry, kept fresh by a daemon thread from `start()` to `stop()`."""

    def __init__(self, node: str, queues: list[str]):
        self.sampler = SystemSampler(interval=0)  # the load, sampled at each beat (the first: since now)
        self.entry = {"node": node, "host": socket.gethostname(), "queues": ",".join(sorted(queues)),
                      "pid": os.getpid(), "started": time.time(), **device_entry()}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.beat_until_stopped, name="worker-registry", daemon=True)

    def start(self) -> Registration:
        self.beat()
        self.thread.start()
        return self

    def beat_until_stopped(self) -> None:
        while not self.stopping.wait(settings.WORKER_BEAT_SECONDS):
            self.beat()

    def beat(self) -> None:
        try:
            load = json.dumps(self.sampler.sample())
        except Exception:  # noqa: BLE001  (the load is a nicety: a failing sample must not stop the beats)
            logger.exception("cannot sample this worker's load; its entry goes without it")
            load = "{}"
        try:
            write_entry({**self.entry, "load": load})
        except redis.RedisError as error:  # the entry expires meanwhile; the next beat writes it again
            logger.warning("cannot write this worker's registry entry (%s); retrying", error)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        try:
            redis_keys.redis_client().delete(registry_key(self.entry["node"]))
        except redis.RedisError as error:
            logger.warning("cannot remove this worker's registry entry (%s); it expires by itself", error)
