"""The workers and the queues' load, as the workers page shows them: every signed-in user sees every worker, and
the run a worker trains only when it is theirs."""

from __future__ import annotations

from ninja import Router, Schema

from rlweb.experiments import workers
from rlweb.experiments.models import Run
from rlweb.experiments.worker_views import queue_loads

router = Router(tags=["workers"])


class WorkerOut(Schema):
    node: str
    host: str
    queues: list[str]
    device: str
    gpu_memory_mb: int | None
    cores: int | None
    uptime_seconds: float
    heartbeat_age_seconds: float
    load: dict[str, float]  # at its last beat: {"system/cpu_percent": ..., ...} (trainer/system_metrics.py); {}: unsaid
    run_id: int | None  # the run it trains, when it is yours


class QueueOut(Schema):
    name: str
    queued: int  # runs waiting on it, anyone's
    workers: int  # live workers serving it


@router.get("/workers", response=list[WorkerOut])
def worker_list(request):
    live = workers.live_workers()
    mine = dict(Run.objects.filter(status=Run.Status.RUNNING, experiment__owner=request.user,
                                   worker_node__in=[worker.node for worker in live]).values_list("worker_node", "pk"))
    return [{**{name: getattr(worker, name) for name in ("node", "host", "queues", "device", "gpu_memory_mb", "cores",
                                                        "uptime_seconds", "heartbeat_age_seconds", "load")},
             "run_id": mine.get(worker.node)} for worker in live]


@router.get("/queues", response=list[QueueOut])
def queue_list(request):
    return queue_loads(workers.live_workers())
