"""Where a queued run waits: its queue, its place in it, and whether any live worker serves that queue.

A run's place is one more than the number of queued runs (anyone's) on the same queue launched before it:
Celery's Redis queues are first in, first out, so that is the order workers take them in.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlweb.experiments import workers
from rlweb.experiments.models import Run, queue_of_device


@dataclass
class QueuePlace:
    queue: str
    position: int  # 1: next
    served: bool  # a live worker consumes this queue


def queue_places(runs, live: list[workers.Worker] | None = None) -> dict[int, QueuePlace]:
    """{run id: its place} for the queued ones among `runs`."""
    wanted = {run.pk for run in runs if run.status == Run.Status.QUEUED}
    if not wanted:
        return {}
    served = workers.served_queues(workers.live_workers() if live is None else live)
    waiting = Run.objects.filter(status=Run.Status.QUEUED).order_by("created", "pk")
    places, counts = {}, {}
    for run_id, device in waiting.values_list("pk", "experiment__device"):
        queue = queue_of_device(device)
        counts[queue] = counts.get(queue, 0) + 1
        if run_id in wanted:
            places[run_id] = QueuePlace(queue, counts[queue], queue in served)
    return places


def mark_queue_places(runs) -> None:
    """Give each of `runs` a `queue_place` (None unless it is queued), for the templates."""
    places = queue_places(runs)
    for run in runs:
        run.queue_place = places.get(run.pk)
