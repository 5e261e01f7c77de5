"""A run's stored history for drawing and downloading.

Charts draw a downsampled summary of every metric, kept in `MetricBucket` rows as events are
persisted (`summarize`, called by the Redis sink in the transaction that writes the events): each
metric key's values are cut into buckets of `width` consecutive values, and a bucket keeps its smallest
and its largest point, so peaks and dips survive however long the run. A key has at most
`MAX_BUCKETS` buckets: when one more is needed, neighbours merge in pairs and the width doubles. A
run with a million values of a metric draws about a thousand points of it, read with one indexed query.

The full data stays in `Event` rows: `events` pages through them and `csv_rows` streams them.
"""

from __future__ import annotations

import functools
import math
import operator
from collections import defaultdict

from django.db import connection
from django.db.models import Max, Q, TextField
from django.db.models.functions import Cast
from django.urls import reverse
from trainer.events import METRIC_KINDS

from rlweb.experiments import rows as bulk_rows
from rlweb.experiments.models import Checkpoint, Event, MetricBucket, Run

EVENT_KINDS = ("started", "resumed", "episode", "train", "eval", "time", "checkpoint", "video", "hyperparameters",
               "finished", "failed")
LOG_KINDS = ("started", "resumed", "checkpoint", "video", "eval", "hyperparameters", "finished", "failed")
MAX_BUCKETS = 512  # per metric: between 256 and 512 buckets once it has more values, two points each
LOG_LENGTH = 200  # the latest log events the page starts with
# The metrics holding one value per finished training episode: rlweb's own, or a CleanRL-style script's logged through
# rlweb_client or imported from TensorBoard (the run page's script knows the same keys: lib/episodes.js).
EPISODE_RETURN_KEYS = ("rollout/episode_return", "charts/episodic_return")
PAGE_SIZE = 5_000  # raw events per page of `events`


# --- keeping the summary ----------------------------------------------------------------------------

def metric_points(events) -> dict[str, list[tuple]]:
    """The numeric values of metric events (`Event` rows or their `as_dict()` records) by key, as
    (seq, step, time, value, band) in seq order. A `..._mean` that comes with its `..._std` gets the band
    (mean - std, mean + std)."""
    points = defaultdict(list)
    for event in events:
        record = event if isinstance(event, dict) else event.as_dict()
        if record["kind"] not in METRIC_KINDS:
            continue
        values, seq, step, time = record["values"], record["seq"], record["step"], record["time"]
        for key, value in values.items():
            if not is_number(value):
                continue
            spread = values.get(key[:-len("_mean")] + "_std") if key.endswith("_mean") else None
            band = (value - spread, value + spread) if is_number(spread) else None
            points[key].append((seq, step, time, value, band))
    return points


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


BUCKET_FIELDS = ("key", "index", "width", "count", "last_seq", "points", "band")


def summarize(run_id: int, events) -> None:
    """Fold newly stored events (in seq order, after everything folded before) into the run's buckets: each key's
    last bucket read, then the buckets that change deleted and written again in one query each, however many
    keys; the buckets plain dicts of `BUCKET_FIELDS` (rows.py: no model object per row)."""
    points = metric_points(events)
    if not points:
        return
    rows = MetricBucket.objects.filter(run_id=run_id)
    changed, written = [], []
    for key, key_points in points.items():
        last = bucket_dicts(rows.filter(key=key).order_by("-index")[:1])  # one index probe, however many buckets
        first, buckets = fold(run_id, key, key_points, last[0] if last else None)
        changed.append(Q(key=key, index__gte=first))
        written += buckets
    rows.filter(functools.reduce(operator.or_, changed)).delete()
    bulk_rows.insert(MetricBucket, BUCKET_FIELDS, bulk_rows.json_text(written), run_id=run_id)  # finite numbers


def bucket_dicts(rows) -> list[dict]:
    """The buckets of `rows` (a MetricBucket queryset) as dicts of BUCKET_FIELDS, their JSON decoded at once (a
    merge reads 511 of them, 1,022 JSON values)."""
    found = list(rows.values_list(*BUCKET_FIELDS[:-2], Cast("points", TextField()), Cast("band", TextField())))
    decoded = bulk_rows.json_loads("[" + ",".join(f"[{points},{band or 'null'}]" for *_, points, band in found) + "]")
    return [dict(zip(BUCKET_FIELDS, (*row[:-2], points, band))) for row, (points, band) in zip(found, decoded)]


def fold(run_id: int, key: str, points: list[tuple], last: dict | None) -> tuple[int, list[dict]]:
    """The key's buckets from index `first` on after folding in `points`, given its last stored bucket (earlier
    ones stay as stored, unless all are full and merge): the last bucket fills up, then new ones follow, each
    taking up to `width` points at once (as many at once as one by one: `add` keeps the first of equal extremes)."""
    buckets = [last] if last else []
    first = last["index"] if last else 0
    width = last["width"] if last else 1
    at = 0
    while at < len(points):
        if buckets and buckets[-1]["count"] < width:
            taken = points[at:at + width - buckets[-1]["count"]]
            add(buckets[-1], taken)
            at += len(taken)
            continue
        if first + len(buckets) == MAX_BUCKETS:  # all full: merge them in pairs, each twice as wide
            earlier = MetricBucket.objects.filter(run_id=run_id, key=key, index__lt=first).order_by("index")
            buckets = merged(bucket_dicts(earlier) + buckets)
            first, width = 0, width * 2
            continue
        seq, step, time, value, band = points[at]
        point = [seq, step, time, value]
        buckets.append({"key": key, "index": first + len(buckets), "width": width, "count": 1, "last_seq": seq,
                        "points": [point, point], "band": list(band) if band else None})
        at += 1
    return first, buckets


def by_value(point) -> float:
    return point[3]


def add(bucket: dict, points: list[tuple]) -> None:
    """Points (seq, step, time, value, band) into a bucket with room for them: its smallest and largest points
    stay the first ones of their value, its band the widest."""
    bucket["count"] += len(points)
    bucket["last_seq"] = points[-1][0]
    low, high = bucket["points"]
    smallest, largest = min(points, key=by_value), max(points, key=by_value)
    if smallest[3] < low[3]:
        low = list(smallest[:4])
    if largest[3] > high[3]:
        high = list(largest[:4])
    bucket["points"] = [low, high]
    bands = [point[4] for point in points if point[4]]
    if bands:
        edges = [bucket["band"]] if bucket["band"] else []
        bucket["band"] = [min(band[0] for band in edges + bands), max(band[1] for band in edges + bands)]


def merged(buckets: list[dict]) -> list[dict]:
    """Neighbours merged in pairs: bucket i of the result holds buckets 2i and 2i+1."""
    result = []
    for index in range(0, len(buckets), 2):
        pair = buckets[index:index + 2]
        points = [point for bucket in pair for point in bucket["points"]]
        bands = [bucket["band"] for bucket in pair if bucket["band"]]
        result.append({
            "key": pair[0]["key"], "index": index // 2, "width": pair[0]["width"] * 2,
            "count": sum(bucket["count"] for bucket in pair), "last_seq": pair[-1]["last_seq"],
            "points": [min(points, key=by_value), max(points, key=by_value)],
            "band": [min(band[0] for band in bands), max(band[1] for band in bands)] if bands else None})
    return result


def rebuild_summary(run_id: int) -> None:
    """Summarise a run's stored events from scratch (after events were deleted, as a resume does)."""
    MetricBucket.objects.filter(run_id=run_id).delete()
    after = 0
    while True:
        page = list(Event.objects.filter(run_id=run_id, seq__gt=after, kind__in=METRIC_KINDS).order_by("seq")[:20_000])
        if not page:
            return
        summarize(run_id, page)
        after = page[-1].seq


# --- forgetting part of it --------------------------------------------------------------------------

def forget_after(run: Run, checkpoint: Checkpoint | None) -> int:
    """Delete the events, checkpoints and videos of `run` that came after `checkpoint` (everything without
    one), so the next attempt's events follow on with no step reported twice or left out; the charts'
    summary of the metrics is rebuilt from what is kept when it held any of them. Returns the seq of the
    last event kept (0: none)."""
    if checkpoint is None:
        return forget_events_after(run, 0, None)
    marker = (checkpoint.reported_event()
              or Event.objects.filter(run=run, step__lte=checkpoint.step).order_by("-seq").first())
    return forget_events_after(run, marker.seq if marker else 0, checkpoint.step)


def forget_after_step(run: Run, step: int) -> int:
    """As `forget_after`, for a script that goes on from env step `step` (a logged run: no checkpoint of ours to
    go by): its events from the first one past `step` on, and its checkpoints and videos past `step`. Step 0 is a
    script starting over: everything after the run's "started" event goes, files included."""
    if step == 0:
        started = Event.objects.filter(run=run, kind="started").order_by("seq").values_list("seq", flat=True).first()
        return forget_events_after(run, started or 0, None)
    first_past = Event.objects.filter(run=run, step__gt=step).order_by("seq").values_list("seq", flat=True).first()
    return forget_events_after(run, run.stored_seq() if first_past is None else first_past - 1, step)


def forget_events_after(run: Run, kept_seq: int, step: int | None) -> int:
    """Delete the events after `kept_seq` and the checkpoints and videos after `step` (None: every one); the run
    goes on from `step`. Returns `kept_seq`."""
    checkpoints, videos = run.checkpoints.all(), run.videos.all()
    if step is not None:
        checkpoints, videos = checkpoints.filter(step__gt=step), videos.filter(step__gt=step)
    Event.objects.filter(run=run, seq__gt=kept_seq).delete()
    checkpoints.delete()  # the models' post_delete signals remove their files too
    videos.delete()
    if MetricBucket.objects.filter(run=run, last_seq__gt=kept_seq).exists():
        rebuild_summary(run.pk)
    run.steps_done = run.start_step = step or 0
    Run.objects.filter(pk=run.pk).update(steps_done=run.steps_done, start_step=run.steps_done)
    return kept_seq


# --- reading it --------------------------------------------------------------------------------------

def last_stored_seq(run: Run) -> int:
    return Event.objects.filter(run=run).aggregate(last=Max("seq"))["last"] or 0


def metric_series(run: Run) -> dict[str, dict]:
    """Every metric's points for drawing, in step order: `step`, `time` and `value` columns (`low` and
    `high` for a band), the number of values summarised (`count`), and `through_seq`, the last event in
    it: a live event at or before that seq is already drawn."""
    series = {}
    rows = list(MetricBucket.objects.filter(run=run).order_by("key", "index").values_list(
        "key", "count", "last_seq", Cast("points", TextField()), Cast("band", TextField())))
    # one decoding for every row: decoding thousands of small values one by one takes longer than the rest
    decoded = bulk_rows.json_loads("[" + ",".join(f"[{points},{band or 'null'}]" for *_, points, band in rows) + "]")
    for (key, count, last_seq, _, _), (points, band) in zip(rows, decoded):
        columns = series.get(key)
        if columns is None:
            columns = series[key] = {"step": [], "time": [], "value": [], "low": [], "high": [], "count": 0}
        for seq, step, time, value in sorted(points) if points[0][0] != points[1][0] else points[:1]:
            columns["step"].append(step)
            columns["time"].append(time)
            columns["value"].append(value)
            columns["low"].append(band[0] if band else None)
            columns["high"].append(band[1] if band else None)
        columns["count"] += count
        columns["through_seq"] = last_seq
    for columns in series.values():
        if not any(value is not None for value in columns["low"]):
            del columns["low"], columns["high"]
    return series


def log_events(run: Run, through_seq: int) -> list[dict]:
    """The latest LOG_LENGTH lifecycle and evaluation events up to `through_seq`, oldest first."""
    # an indexed read per kind, on (run, kind, seq): fast however many metric events the run has (one query over
    # all these kinds may walk (run, seq) back through millions of them); written as SQL, as Django's UNION of
    # the same querysets took 5 ms to compile, a third of history.json
    table = connection.ops.quote_name(Event._meta.db_table)
    part = (f"SELECT * FROM (SELECT * FROM {table} WHERE run_id = %s AND kind = %s AND seq <= %s "
            f"ORDER BY seq DESC LIMIT {int(LOG_LENGTH)}) AS part_{{}}")
    query = " UNION ALL ".join(part.format(number) for number in range(len(LOG_KINDS)))
    latest = sorted(Event.objects.raw(query, [value for kind in LOG_KINDS for value in (run.pk, kind, through_seq)]),
                    key=lambda event: event.seq)
    return [event.as_dict() for event in latest[-LOG_LENGTH:]]


def change_marks(run: Run, through_seq: int) -> list[dict]:
    """Every hyperparameter change applied up to `through_seq` (not the refused ones): a mark on every chart."""
    rows = Event.objects.filter(run=run, kind="hyperparameters", seq__lte=through_seq).order_by("seq")
    return [event.as_dict() for event in rows if "error" not in event.values]


def last_episode_return(run: Run, through_seq: int) -> float | None:
    """The return of the run's latest training episode up to `through_seq`, exact (the summary keeps each bucket's
    smallest and largest value, not its last), or None before its first."""
    for key in EPISODE_RETURN_KEYS:
        values = Event.objects.filter(run=run, kind__in=METRIC_KINDS, seq__lte=through_seq, values__has_key=key) \
            .order_by("-seq").values_list("values", flat=True).first()
        if values is not None and is_number(values[key]):
            return values[key]
    return None


def run_summary(run: Run) -> dict:
    return {"id": run.pk, "status": run.status, "steps_done": run.steps_done, "total_steps": run.total_steps,
            "finished": run.is_finished, "error": run.error}


def checkpoint_list(run: Run) -> list[dict]:
    return [{"id": checkpoint.pk, "tag": checkpoint.tag, "step": checkpoint.step, "url": checkpoint.get_absolute_url()}
            for checkpoint in run.current_checkpoints()]


def video_list(run: Run) -> list[dict]:
    """Newest first."""
    return [{"id": video.pk, "step": video.step, "episode_return": video.episode_return,
             "url": reverse("video-file", args=[video.pk])} for video in run.videos.order_by("-step", "-id")]


def history(run: Run) -> dict:
    """What the run page starts from: the metrics (downsampled), the log, checkpoints and videos, and
    `last_seq`, where the live stream picks up. `last_seq` is read first: the metrics, written in the
    same transactions as the events, hold at least everything up to it."""
    last_seq = last_stored_seq(run)
    return {"run": run_summary(run), "last_seq": last_seq, "metrics": metric_series(run),
            "log": log_events(run, last_seq), "changes": change_marks(run, last_seq),
            "last_episode_return": last_episode_return(run, last_seq),
            "checkpoints": checkpoint_list(run), "videos": video_list(run)}


def events(run: Run, after: int = 0, kinds: tuple[str, ...] = EVENT_KINDS, limit: int = PAGE_SIZE) -> dict:
    """Stored events after `after`, in seq order, `limit` at most; `next_after` continues (None at the end)."""
    rows = list(Event.objects.filter(run=run, seq__gt=after, kind__in=kinds).order_by("seq")[:limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return {"run": run_summary(run), "events": [row.as_dict() for row in rows],
            "next_after": rows[-1].seq if more else None}


def metric_keys(run: Run) -> list[str]:
    return sorted(set(MetricBucket.objects.filter(run=run).values_list("key", flat=True).order_by()))


def csv_rows(run: Run):
    """The header, then one row per stored event: seq, kind, step, time and a column per metric key."""
    last_seq = last_stored_seq(run)
    keys = metric_keys(run)
    yield ["seq", "kind", "step", "time", *keys]
    rows = Event.objects.filter(run=run, seq__lte=last_seq).order_by("seq").values_list(
        "seq", "kind", "step", "time", "values")
    for seq, kind, step, time, values in rows.iterator(chunk_size=5_000):
        yield [seq, kind, step, time, *(plain_cell(values.get(key)) for key in keys)]


def plain_cell(value):
    return "" if value is None or isinstance(value, (dict, list)) else value
