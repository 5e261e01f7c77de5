"""Where a queued run waits: its queue, its place in it, when it should start, and whether any live worker
serves that queue.

The place is the order the fair-share scheduler (scheduler.py) would send the queue's runs in: those already
sent to a worker first, then, one by one, the run of the user with the fewest running on the queue (between
equals, users take turns; then the first launched). The estimated start comes from the running runs' time left and each run's length at its experiment's
speed so far: none until a speed is known.
"""

from __future__ import annotations

from rlweb.experiments import scheduler, workers
from rlweb.experiments.models import Run

QueuePlace = scheduler.Place


def queue_places(runs, live: list[workers.Worker] | None = None) -> dict[int, QueuePlace]:
    """{run id: its place} for the queued ones among `runs`."""
    wanted = {run.pk for run in runs if run.status == Run.Status.QUEUED}
    if not wanted:
        return {}
    return {run_id: place for run_id, place in scheduler.places(live).items() if run_id in wanted}


def mark_queue_places(runs) -> None:
    """Give each of `runs` a `queue_place` (None unless it is queued), for the templates."""
    places = queue_places(runs)
    for run in runs:
        run.queue_place = places.get(run.pk)
