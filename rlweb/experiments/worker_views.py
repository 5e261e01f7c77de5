"""The workers page: every live worker (workers.py's registry) with the run it trains, and the queues' load."""

from __future__ import annotations

import trainer
from django.conf import settings
from django.db.models import Count
from django.shortcuts import render

from rlweb.experiments import workers
from rlweb.experiments.models import Run, queue_of_device


def worker_list(request):
    """Signed-in users see every worker; the name of the run a worker trains only when it is theirs (staff: all)."""
    live = workers.live_workers()
    running = Run.objects.filter(status=Run.Status.RUNNING, worker_node__in=[worker.node for worker in live])
    by_node = {run.worker_node: run for run in running.select_related("experiment__owner")}
    for worker in live:
        worker.run = by_node.get(worker.node)
    plugins = [(name, trainer.origin(name)) for name in trainer.algorithm_names() if not trainer.origin(name).builtin]
    return render(request, "experiments/worker_list.html", {"workers": live, "queues": queue_loads(live),
                                                            "ttl_seconds": settings.WORKER_TTL_SECONDS,
                                                            "plugins": plugins, "broken": trainer.broken_algorithms()})


def queue_loads(live: list[workers.Worker]) -> list[dict]:
    """Each queue with queued runs or a worker: how many runs wait on it and how many live workers serve it."""
    waiting = {}
    for row in Run.objects.filter(status=Run.Status.QUEUED).values("experiment__device").annotate(count=Count("pk")):
        queue = queue_of_device(row["experiment__device"])
        waiting[queue] = waiting.get(queue, 0) + row["count"]
    names = sorted(set(waiting) | workers.served_queues(live))
    return [{"name": name, "queued": waiting.get(name, 0),
             "workers": sum(name in worker.queues for worker in live)} for name in names]
