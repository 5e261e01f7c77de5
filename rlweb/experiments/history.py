"""A run's stored events for drawing: every kind, long histories thinned out on the database side."""

from __future__ import annotations

import math

from django.db.models import F, Max
from django.db.models.functions import RowNumber
from django.db.models.expressions import Window

from rlweb.experiments.models import Event, Run

EVENT_KINDS = ("started", "episode", "train", "eval", "time", "checkpoint", "video", "finished", "failed")
MAX_POINTS_PER_KIND = 4_000


def run_summary(run: Run) -> dict:
    return {"id": run.pk, "status": run.status, "steps_done": run.steps_done, "total_steps": run.total_steps,
            "finished": run.is_finished, "error": run.error}


def checkpoint_list(run: Run) -> list[dict]:
    return [{"id": checkpoint.pk, "tag": checkpoint.tag, "step": checkpoint.step, "url": checkpoint.get_absolute_url()}
            for checkpoint in run.checkpoints.all()]


def history(run: Run, after: int = 0, kinds: tuple[str, ...] = EVENT_KINDS, full: bool = False) -> dict:
    """Events after `after`, ordered by `seq`. Unless `full`, a kind with more than MAX_POINTS_PER_KIND
    events keeps an evenly spaced selection of them (the response names the thinned kinds); `last_seq`
    is always the last stored event, where a live stream picks up. `checkpoints` are the run's current
    checkpoints (older "best" ones that the events mention have been replaced)."""
    last_seq = Event.objects.filter(run=run).aggregate(last=Max("seq"))["last"] or 0
    events = Event.objects.filter(run=run, seq__gt=after, seq__lte=last_seq)  # rows written meanwhile come live
    rows, thinned = [], []
    for kind in kinds:
        of_kind = events.filter(kind=kind)
        count = of_kind.count()
        if not count:
            continue
        if full or count <= MAX_POINTS_PER_KIND:
            rows.extend(of_kind)
            continue
        stride = math.ceil(count / MAX_POINTS_PER_KIND)
        numbered = of_kind.annotate(position=Window(RowNumber(), order_by=F("seq").asc()))
        rows.extend(numbered.annotate(remainder=(F("position") - 1) % stride).filter(remainder=0))
        thinned.append(kind)
    rows.sort(key=lambda event: event.seq)
    return {"run": run_summary(run), "last_seq": last_seq, "thinned": thinned, "checkpoints": checkpoint_list(run),
            "events": [event.as_dict() for event in rows]}
