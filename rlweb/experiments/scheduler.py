"""Fair share: which queued run goes to a worker when one is free, decided from the database.

Queued runs wait in the database, not in Celery: a run's task message is sent only when a worker of its queue
is free, so the order in which runs start is decided here, not by the broker's first in, first out.

    launch/resume ──> queued, waiting ──dispatch──> queued, dispatched (its message sent) ──claim──> running

Slots. Each live worker (the registry, workers.py) trains one run at a time (its solo pool). A worker is busy
while a run it claimed is running. Runs already dispatched and not yet claimed each take an idle worker of their
queue. The idle workers left over are free.

Choice. For each free worker, among the waiting runs of the queues it serves whose owner is under their cap on
that queue (`QueueLimit`, else settings.MAX_RUNNING_PER_USER_PER_QUEUE; 0: no cap), the run whose owner has the
fewest runs running or dispatched on that queue goes first. Between owners with as many, the one whose last run on
the queue was sent longest ago (or never) goes first, so that on a single worker two users' runs take turns
instead of one user's whole backlog going first; then first in, first out (created, then id).

When. `dispatch()` runs whenever a slot may have freed or a run may have arrived: after a launch or resume
commits (lifecycle.enqueue), when a worker has finished a run (lifecycle.train) and when one starts
(tasks.py), and as a periodic chore every few seconds (the safety net: a process that died between a commit
and its dispatch loses nothing, since the run still waits in the database). One dispatcher at a time: a Redis
lock, so two processes never hand one free worker two runs.

Lost messages. A run dispatched but not claimed within REDISPATCH_SECONDS (a Redis restart lost its message,
or its worker died before taking it) is sent again; the claim is a conditional update, so an extra copy does
nothing. When the task queue (Redis) cannot be reached, the waiting runs are marked `send_failed` (the pages say
so) and stay in the database; the first dispatch that reaches it again sends them.

Place and estimate. `waiting_order()` replays the same choice over the waiting runs of a queue (as if none of the
running runs ended before all of them started) for each run's place; `estimated_starts()` adds when each would
start, from the running runs' time left (`Run.seconds_left`) and each waiting run's length at its experiment's
speed so far.
"""

from __future__ import annotations

import heapq
import logging
import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone as dt_timezone

import redis
from django.conf import settings
from django.db.models import Max
from django.utils import timezone
from kombu.exceptions import OperationalError

from rlweb.celery import app
from rlweb.experiments import redis_keys, workers
from rlweb.experiments.models import QueueLimit, Run, queue_of_device

logger = logging.getLogger(__name__)

TRAIN_TASK = "rlweb.train_run"  # tasks.train_run; sent by name, so this module does not import the tasks
REDISPATCH_SECONDS = 60.0  # a dispatched run not claimed by then is sent again
LOCK_KEY = "rlweb:dispatch-lock"
LOCK_SECONDS = 30  # the lock expires by itself if its holder dies
NEVER = datetime.min.replace(tzinfo=dt_timezone.utc)  # a user none of whose runs was ever sent on a queue
Status = Run.Status


@dataclass
class Waiting:
    """A queued run as the scheduler sees it."""

    run_id: int
    task_id: str
    queue: str
    owner_id: int
    created: datetime
    dispatched: bool


def dispatch(live: list[workers.Worker] | None = None) -> list[int]:
    """Send waiting runs to the free workers, fairly; returns the ids of the runs sent. Nothing happens when
    another process holds the lock (it dispatches then) or Redis cannot be reached (the run stays waiting)."""
    try:
        lock = redis_keys.redis_client().lock(LOCK_KEY, timeout=LOCK_SECONDS, blocking_timeout=LOCK_SECONDS)
        if not lock.acquire():
            logger.warning("the dispatch lock stayed taken for %s s; the next dispatch sends what waits",
                           LOCK_SECONDS)
            return []
    except redis.RedisError as error:
        logger.warning("cannot dispatch queued runs (%s); they wait in the database", error)
        Run.objects.filter(status=Status.QUEUED, dispatched_at=None).update(send_failed=True)  # the pages say why
        return []
    try:
        return dispatch_locked(workers.live_workers() if live is None else live)
    finally:
        try:
            lock.release()
        except redis.RedisError:  # expired or Redis went away: the next dispatch takes it again
            pass


def dispatch_locked(live: list[workers.Worker]) -> list[int]:
    Run.objects.filter(status=Status.QUEUED, send_failed=True).update(send_failed=False)  # Redis answers again
    waiting = waiting_runs()
    free = free_workers(live, [run for run in waiting if run.dispatched])
    if not free:
        return []
    load = load_of(waiting)
    candidates = [run for run in waiting if not run.dispatched]
    book = Turns()
    sent = []
    for worker in free:
        choice = next_run(candidates, set(worker.queues), load, book)
        if choice is None:
            continue
        candidates.remove(choice)
        now = timezone.now()
        load[choice.owner_id, choice.queue] += 1
        book.last_sent[choice.owner_id, choice.queue] = now
        if send(choice.run_id, choice.task_id, choice.queue):
            Run.objects.filter(pk=choice.run_id, status=Status.QUEUED).update(dispatched_at=now)
            sent.append(choice.run_id)
    return sent


def send(run_id: int, task_id: str, queue: str) -> bool:
    """Send a run's task message, to a free worker of `queue`. When the task queue
    (Redis) cannot be reached the run stays waiting, marked `send_failed`, and a later dispatch sends it."""
    try:
        app.send_task(TRAIN_TASK, args=[run_id], task_id=task_id, queue=queue)
    except (OperationalError, redis.RedisError, OSError) as error:
        logger.warning("run %s: cannot reach the task queue (%s); it stays queued and is sent again later",
                       run_id, error)
        Run.objects.filter(pk=run_id, status=Status.QUEUED).update(send_failed=True)
        return False
    Run.objects.filter(pk=run_id, send_failed=True).update(send_failed=False)
    return True


def waiting_runs() -> list[Waiting]:
    """Every queued run, first in first out; a dispatched one whose message may be lost counts as waiting."""
    stale = timezone.now() - timedelta(seconds=REDISPATCH_SECONDS)
    rows = (Run.objects.filter(status=Status.QUEUED, stop_requested=False).order_by("created", "pk")
            .values_list("pk", "task_id", "experiment__device", "experiment__owner_id", "created", "dispatched_at"))
    return [Waiting(run_id, task_id, queue_of_device(device), owner_id, created,
                    dispatched_at is not None and dispatched_at >= stale)
            for run_id, task_id, device, owner_id, created, dispatched_at in rows]


def free_workers(live: list[workers.Worker], dispatched: list[Waiting]) -> list[workers.Worker]:
    """The live workers neither training a run nor spoken for by a dispatched run (each takes an idle worker of its
    queue, those serving fewest queues first, so a worker of several queues stays free for the others)."""
    busy = set(Run.objects.filter(status=Status.RUNNING).values_list("worker_node", flat=True))
    idle = sorted((worker for worker in live if worker.node not in busy), key=lambda worker: len(worker.queues))
    for run in dispatched:
        taker = next((worker for worker in idle if run.queue in worker.queues), None)
        if taker is not None:
            idle.remove(taker)
    return idle


def running_counts() -> Counter:
    """{(owner id, queue): runs running on a worker} over every queue."""
    rows = Run.objects.filter(status=Status.RUNNING).exclude(worker_node="").values_list("experiment__owner_id", "experiment__device")
    return Counter((owner_id, queue_of_device(device)) for owner_id, device in rows)


def load_of(waiting: list[Waiting]) -> Counter:
    """The running counts with the dispatched runs counted too: their messages are out, so they hold a place."""
    load = running_counts()
    for run in waiting:
        if run.dispatched:
            load[run.owner_id, run.queue] += 1
    return load


class Turns:
    """What the choice weighs besides the running counts: each user's cap on running runs per queue (their
    `QueueLimit` there, else the site's default; 0: none), and when each user's last run on each queue was sent."""

    def __init__(self):
        self.own_caps = {(limit.user_id, limit.queue): limit.max_running for limit in QueueLimit.objects.all()}
        self.last_sent = {}
        rows = (Run.objects.exclude(dispatched_at=None).values_list("experiment__owner_id", "experiment__device")
                .annotate(last=Max("dispatched_at")))
        for owner_id, device, last in rows:
            key = owner_id, queue_of_device(device)
            self.last_sent[key] = max(last, self.last_sent.get(key, last))

    def cap(self, owner_id: int, queue: str) -> int:
        return self.own_caps.get((owner_id, queue), settings.MAX_RUNNING_PER_USER_PER_QUEUE)

    def allows(self, owner_id: int, queue: str, load: Counter) -> bool:
        cap = self.cap(owner_id, queue)
        return not cap or load[owner_id, queue] < cap

    def turn(self, run: Waiting, load: Counter) -> tuple:
        """The sort key of the fair choice: fewest running, longest since a run was sent, first launched."""
        return load[run.owner_id, run.queue], self.last_sent.get((run.owner_id, run.queue), NEVER), run.created, \
            run.run_id


def next_run(candidates: list[Waiting], queues: set[str], load: Counter, book: Turns) -> Waiting | None:
    """The fair choice among `candidates` on `queues` whose owner is under their cap there (None: none)."""
    eligible = [run for run in candidates if run.queue in queues and book.allows(run.owner_id, run.queue, load)]
    return min(eligible, key=lambda run: book.turn(run, load), default=None)


# --- place and estimated start ---------------------------------------------------------------------------------

@dataclass
class Place:
    queue: str
    position: int  # 1: next
    served: bool  # a live worker consumes this queue
    capped: bool  # its owner is at their cap on this queue: it waits for one of their own runs to end
    starts_in: float | None  # seconds from now; None: no estimate yet (no speed known)


def places(live: list[workers.Worker] | None = None) -> dict[int, Place]:
    """{run id: its place} for every queued run: the dispatched ones first (their messages are out), then the
    waiting ones in the order `dispatch` would send them."""
    live = workers.live_workers() if live is None else live
    waiting = waiting_runs()
    load = load_of(waiting)
    book = Turns()
    result = {}
    for queue in sorted({run.queue for run in waiting}):
        mine = [run for run in waiting if run.queue == queue]
        order = [run for run in mine if run.dispatched] + waiting_order(
            [run for run in mine if not run.dispatched], queue, Counter(load), book)
        starts = estimated_starts(order, queue, live)
        served = any(queue in worker.queues for worker in live)
        for position, run in enumerate(order, start=1):
            result[run.run_id] = Place(queue, position, served,
                                       capped=not run.dispatched and not book.allows(run.owner_id, queue, load),
                                       starts_in=starts.get(run.run_id))
    return result


def waiting_order(candidates: list[Waiting], queue: str, load: Counter, book: Turns) -> list[Waiting]:
    """The order `dispatch` would send `candidates` of one queue in, were each sent as the one before starts (a
    capped owner's runs come after everyone else's, in their own order)."""
    order, left = [], list(candidates)
    book.last_sent = dict(book.last_sent)
    now = timezone.now()
    while left:
        choice = next_run(left, {queue}, load, book) or min(left, key=lambda run: (run.created, run.run_id))
        left.remove(choice)
        load[choice.owner_id, queue] += 1
        book.last_sent[choice.owner_id, queue] = now + timedelta(microseconds=len(order) + 1)
        order.append(choice)
    return order


def estimated_starts(order: list[Waiting], queue: str, live: list[workers.Worker]) -> dict[int, float]:
    """{run id: seconds until it starts} for the runs of `order` whose start can be estimated: each worker of the
    queue frees when its running run ends (its time left so far) or now when idle, and each run takes the first
    worker free, for its length at its experiment's speed so far. An unknown length ends the estimates."""
    nodes = [worker.node for worker in live if queue in worker.queues]
    if not nodes:
        return {}
    running = {run.worker_node: run for run in Run.objects.filter(status=Status.RUNNING, worker_node__in=nodes)}
    frees = []
    for node in nodes:
        run = running.get(node)
        left = 0.0 if run is None else run.seconds_left
        if left is None:
            continue  # a run that has not reported progress yet: no estimate for its worker
        heapq.heappush(frees, left)
    lengths = expected_lengths([run.run_id for run in order])
    starts = {}
    for run in order:
        if not frees:
            break
        start = heapq.heappop(frees)
        starts[run.run_id] = start
        length = lengths.get(run.run_id)
        if length is None:
            break
        heapq.heappush(frees, start + length)
    return starts


def expected_lengths(run_ids: list[int]) -> dict[int, float]:
    """{run id: seconds it should train}: its steps left at the mean speed its experiment's runs have trained at."""
    runs = list(Run.objects.filter(pk__in=run_ids))
    speeds = {}
    for sibling in Run.objects.filter(experiment__in={run.experiment_id for run in runs}, steps_done__gt=0):
        if sibling.average_steps_per_second:
            speeds.setdefault(sibling.experiment_id, []).append(sibling.average_steps_per_second)
    return {run.pk: max(0, run.total_steps - run.steps_done) / statistics.fmean(speeds[run.experiment_id])
            for run in runs if run.experiment_id in speeds}
