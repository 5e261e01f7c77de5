"""Runs logged from a user's own script: the API (rlweb/api/logged_runs.py) calls these functions for rlweb_client.

A logged run is a run like any other: an `Experiment` (algorithm `LOGGED`, reused by name) and a `Run`, whose points
become `Event` rows with the charts' summary (history.summarize) in one transaction, then entries of its Redis live
stream with the same ids, so the run page, its live charts, the compare page, the CSV and notes work unchanged.
A point becomes one metric event (kind `eval` when it holds an `eval/` value, `episode` with a `rollout/` one,
`time` when every value is a `system/` or `time/` one, else `train`): the charts draw every numeric key of those
kinds, whatever its name.

The client numbers its points (`seq` 1, 2, 3, ...) and may send one twice (a retry after a lost answer): a point
at or below the highest seq stored (`LoggedRun.stored_through`) is dropped as a repeat, under the run's row lock,
so two requests at once store each point once, in order. NaN, infinities, non-numbers and names that are too long
or use other characters are dropped per value, with the reason in the answer.

Liveness: the run is running from its first request, and its heartbeat (`Run.heartbeat_at`) is the time of its
script's last request. A script may log nothing for a while, so it counts as silent only after
`settings.LOGGED_RUN_SILENCE_SECONDS` (default 10 minutes; `Run.heartbeat_deadline`): the lost-run reaper then marks
it lost, and nothing resumes it (its experiment has no `auto_resume`). A lost logged run is only presumed dead:
its script's next points or files bring it back to running. `finish` ends it for good (later points: 409), and
so does Cancel on its page.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from pathlib import Path

import redis
from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import F, Max
from django.db.models.functions import Greatest
from django.utils import timezone
from trainer.events import make_event

from rlweb.experiments import lifecycle, rows, storage_use
from rlweb.experiments.history import summarize
from rlweb.experiments.models import LOGGED, Checkpoint, Event, Experiment, Run, Video
from rlweb.experiments.redis_keys import stream_key
from rlweb.experiments.sink import FINISHED_STREAM_SECONDS, RUNNING_STREAM_SECONDS, STREAM_MAXLEN, STREAM_TAIL, \
    sink_client
from rlweb.logged.models import LoggedRun
from rlweb.projects import access

logger = logging.getLogger(__name__)

METRIC_NAME = re.compile(r"[A-Za-z0-9_./ -]+")
MAX_NAME_LENGTH = 200
MAX_POINTS = 5_000  # per request
MAX_CONFIG_BYTES = 64 * 1024
LARGEST_VALUE = 1e300  # larger magnitudes are refused: a chart cannot draw them, and their sums overflow
FILE_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")
SILENT_ERROR = ("Its script sent nothing for {minutes:g} minutes (it stopped, or lost its connection); "
                "its next points bring the run back.")
ENDED = (Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED, Run.Status.PRUNED)  # not lost
Status = Run.Status


class Refused(Exception):
    """A request the run cannot take: `status` (409 ended, 413 too large or past the quota) and why."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


# --- create ------------------------------------------------------------------------------------------------

def create(user, experiment: str, config: dict, name: str = "", host: str = "", command: str = "",
           git_commit: str = "", client_version: str = "", project: int | None = None) -> Run:
    """A new running run of `user`'s logged experiment named `experiment` (made on first use, in `project` when
    given: a project's id that `user` owns or edits), with its config's seed (seed_number); its log starts with a
    `started` event. Refused (404) for a project `user` is not in, (403) for one they only view."""
    now = timezone.now()
    total_steps = planned_steps(config)
    shared = project_to_log_into(user, project)
    with transaction.atomic():
        mine = Experiment.objects.select_for_update().filter(owner=user, name=experiment, algorithm=LOGGED)
        found = (mine if shared is None else mine.filter(project=shared)).first()
        if found is None:
            found = Experiment.objects.create(
                owner=user, project=shared, name=experiment, algorithm=LOGGED,
                env_id=text_setting(config, "env_id", "env"),
                hyperparameters=config, total_steps=total_steps, device=LOGGED, auto_resume=False, num_seeds=0,
                keep_checkpoints=0)
        seed = seed_number(found, config)
        run = Run.objects.create(experiment=found, seed=seed, status=Status.RUNNING, total_steps=total_steps,
                                 worker_host=host[:200], device_used=LOGGED, first_started_at=now, started_at=now,
                                 heartbeat_at=now, attempts=1)
        Experiment.objects.filter(pk=found.pk).update(num_seeds=F("num_seeds") + 1)
        LoggedRun.objects.create(run=run, name=name, host=host, command=command, git_commit=git_commit,
                                 client_version=client_version, config=config)
        started = make_event("started", 0, 0.0, {"algorithm": LOGGED, "env_id": found.env_id, "device": host or "?",
                                                 "seed": seed, "notes": [f"logged from {host or 'a script'}"]})
        events = store(run, [started])
    stream(run.pk, events)
    return run


def shared_config(runs: list[Run]) -> list[tuple[str, object, bool]]:
    """A logged experiment's config as its runs' scripts sent it: (name, value, whether every run sent that value),
    sorted by name; a name some runs lack counts as differing."""
    configs = [run.logged.config for run in runs if hasattr(run, "logged")]
    names = sorted({name for config in configs for name in config})
    missing = object()
    return [(name, configs[0].get(name), all(config.get(name, missing) == configs[0].get(name, missing)
                                              for config in configs)) for name in names]


def project_to_log_into(user, project_id: int | None):
    """The project of that id that `user` may log runs into, or None for none asked."""
    if project_id is None:
        return None
    project = access.member_projects(user).filter(pk=project_id).first()
    if project is None:
        raise Refused(404, f"There is no project {project_id} of yours: see your projects page for their ids.")
    if not access.editable_projects(user).filter(pk=project_id).exists():
        raise Refused(403, "A viewer of this project cannot log runs into it: ask its owner to make you an editor.")
    return project


def seed_number(experiment: Experiment, config: dict) -> int:
    """The run's seed: the script's own (its config's `seed`, as CleanRL's `--seed` gives it) unless another run of
    the experiment has it; else the number after the highest so far."""
    taken = set(experiment.runs.values_list("seed", flat=True))
    seed = config.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**30 and seed not in taken:
        return seed
    return max(taken, default=-1) + 1


def planned_steps(config: dict) -> int:
    """The run's planned env steps, from its config (CleanRL's `total_timesteps`, or `total_steps`); at least 1.
    The count grows with the steps its points report."""
    for key in ("total_timesteps", "total_steps"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**62:
            return value
    return 1


def text_setting(config: dict, *keys: str) -> str:
    """The first of `keys` that the config holds as text (the environment id a CleanRL script names)."""
    return next((config[key][:200] for key in keys if isinstance(config.get(key), str)), "")


# --- points ------------------------------------------------------------------------------------------------

def add_points(run: Run, points: list[dict]) -> tuple[int, list[dict]]:
    """Store the points after the highest seq stored, in order, each as one metric event. Returns the highest seq
    stored and what was dropped ([{seq, reason}]: repeats, values refused). Refused (409) once the run ended."""
    with transaction.atomic():
        logged = hold(run)
        through, dropped, events = logged.stored_through, [], []
        for point in points:
            if point["seq"] <= through:
                dropped.append({"seq": point["seq"], "reason": f"a repeat: points through seq {through} are stored"})
                continue
            values, refused, kind = checked_values(point["values"])
            if refused:
                dropped += [{"seq": point["seq"], "reason": reason} for reason in refused]
            if values:
                events.append({"kind": kind, "step": int(point["step"]), "time": round(float(point["time"]), 4),
                               "values": values})
            through = point["seq"]
        stored = store(run, events)
        if through != logged.stored_through:
            LoggedRun.objects.filter(pk=run.pk).update(stored_through=through)
    stream(run.pk, stored)
    return through, dropped


def checked_values(values: dict) -> tuple[dict, list[str], str]:
    """The values a chart can draw, as floats, why each other one was dropped, and the kind of event they make
    (`kind_of`). Every point of a script names the same few metrics: a name is checked once (`name_refused`)."""
    kept, refused = {}, []
    for name, value in values.items():
        # nearly every value: a float within the bounds (NaN and infinities are not) of a name seen before
        if type(value) is float and -LARGEST_VALUE <= value <= LARGEST_VALUE and name in NAMES_SEEN:
            kept[name] = value
            continue
        problem = name_refused(name)
        if problem is None:
            problem = value_refused(value)
        if problem is None:
            kept[name] = float(value)
        else:
            shown = name if len(name) <= 60 else name[:60] + "…"
            refused.append(f"{shown!r}: {problem}")
    return kept, refused, kind_of(tuple(kept))


NAMES_SEEN: set[str] = set()  # metric names found good, up to 4,096 (a script's few, over and over)


def name_refused(name: str) -> str | None:
    if len(name) > MAX_NAME_LENGTH or not METRIC_NAME.fullmatch(name):
        return f"a metric name is 1 to {MAX_NAME_LENGTH} letters, digits, spaces or _ . / -"
    if len(NAMES_SEEN) < 4096:
        NAMES_SEEN.add(name)
    return None


def value_refused(value) -> str | None:
    if type(value) is float:  # nearly every value: the bool and type checks below are for the rest
        if not math.isfinite(value):
            return f"{value} is not a finite number"
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"not a number ({type(value).__name__})"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if abs(value) > LARGEST_VALUE:
        return f"larger than {LARGEST_VALUE:g} in magnitude"
    return None


@functools.lru_cache(maxsize=4096)
def kind_of(names: tuple[str, ...]) -> str:
    """The event kind a point with values of these names is stored as: `eval` or `episode` (the run page's
    evaluation box and episode count read those), `time` for system figures alone, else `train`. The charts draw
    every key of every metric kind."""
    if any(name.startswith("eval/") for name in names):
        return "eval"
    if any(name.startswith("rollout/") for name in names):
        return "episode"
    if names and all(name.startswith(("system/", "time/")) for name in names):
        return "time"  # the client's system samples, as a worker's run reports them
    return "train"


# --- files -------------------------------------------------------------------------------------------------

def add_file(run: Run, kind: str, step: int, upload) -> int:
    """Keep an uploaded video or checkpoint (a Django UploadedFile) in storage as the trainer's are (a `Video`, a
    periodic `Checkpoint`), with its event in the run's log; returns the row's id. Refused (413) past
    `settings.LOGGED_FILE_MAX_MB` or the owner's storage quota, (409) once the run ended."""
    limit = settings.LOGGED_FILE_MAX_MB * storage_use.MEGABYTE
    if upload.size > limit:
        raise Refused(413, f"The file takes {storage_use.describe(upload.size)}; a logged run's files may take "
                           f"{storage_use.describe(limit)} each.")
    owner = run.experiment.owner_id
    quota = storage_use.quota_bytes(owner)
    used = storage_use.used_bytes(owner) if quota is not None else 0
    if quota is not None and used + upload.size > quota:
        raise Refused(413, f"The file was not kept: your checkpoints and videos take {storage_use.describe(used)} of "
                           f"your storage quota of {storage_use.describe(quota)}. Delete experiments you no longer "
                           f"need (the storage page lists them), or ask the admin for more.")
    suffix = Path(upload.name or "").suffix.lower()
    if kind == "video":
        row = Video(run=run, step=step)
        name = f"step_{step}.mp4"
    else:
        row = Checkpoint(run=run, tag=Checkpoint.Tag.PERIODIC, step=step)
        name = f"step_{step}{suffix if FILE_SUFFIX.fullmatch(suffix) else '.bin'}"
    with transaction.atomic():
        hold(run)  # before the file: an ended run stores nothing
        row.size = upload.size
        row.file.save(name, upload, save=False)
        try:
            row.save()
        except DatabaseError:
            row.file.delete(save=False)
            raise
        values = ({"step": step, "video_id": row.pk, "episode_return": None} if kind == "video" else
                  {"tag": Checkpoint.Tag.PERIODIC, "step": step, "checkpoint_id": row.pk})
        events = store(run, [make_event(kind, step, seconds_since_start(run), values)])
    stream(run.pk, events)
    return row.pk


def seconds_since_start(run: Run) -> float:
    return max(0.0, (timezone.now() - run.started_at).total_seconds()) if run.started_at else 0.0


# --- resume ----------------------------------------------------------------------------------------------

def resume(run: Run, from_step: int | None = None, host: str = "", command: str = "", git_commit: str = "",
           client_version: str = "") -> dict:
    """Its script, started again (after a crash, a preemption, or to train longer), goes on logging into the run,
    which is running again whatever its status. With `from_step` (the step of the checkpoint the script goes on
    from) what it logged past that step is forgotten, its points, videos and checkpoints, so no step is drawn
    twice; a page that drew them reloads. The log says which attempt ended, how, and where the next one goes on.
    Returns where it goes on: the last step and the last point's time (the script's clock goes on from there)."""
    with transaction.atomic():
        logged = LoggedRun.objects.select_for_update().get(pk=run.pk)
        run.refresh_from_db()
        interrupted, reason, forgotten_before = run.status, run.error, len(run.forgotten_seqs)
        if from_step is not None:
            lifecycle.forget_dead_attempt(run, None, after_step=from_step)
        clear_stream = len(run.forgotten_seqs) > forgotten_before
        kept = Event.objects.filter(run=run).aggregate(step=Max("step"), seconds=Max("time"))
        step = max(run.steps_done, kept["step"] or 0) if from_step is None else from_step
        seconds = float(kept["seconds"] or 0.0)
        now = timezone.now()
        Run.objects.filter(pk=run.pk).update(status=Status.RUNNING, finished_at=None, error="", heartbeat_at=now,
                                             attempts=F("attempts") + 1, worker_host=host[:200] or run.worker_host)
        LoggedRun.objects.filter(pk=run.pk).update(
            **{field: value for field, value in (("host", host), ("command", command), ("git_commit", git_commit),
                                                 ("client_version", client_version)) if value})
        run.refresh_from_db()
        values = {"attempt": run.attempts - 1, "interrupted": interrupted,
                  "reason": resume_reason(interrupted, reason), "from_step": step, "script": host or "an unknown host", "forgot_after": from_step is not None}
        events = store(run, [make_event("resumed", step, seconds, values)])
    if clear_stream:  # the forgotten events: a page following them sees the gap and reloads
        lifecycle.forget_streams([run.pk])
    stream(run.pk, events)
    return {"next_seq": logged.stored_through + 1, "step": step, "seconds": seconds}


def resume_reason(status: str, error: str) -> str:
    """How the attempt before a resume ended, in a few words."""
    if status == Status.RUNNING:
        return "its script stopped without finishing the run"
    if status == Status.FAILED:
        return error.strip().splitlines()[-1][:300] if error.strip() else "its script reported a failure"
    return error[:300] if error else {Status.SUCCEEDED: "it had finished", Status.CANCELLED: "it was cancelled",
                                      Status.LOST: "its script went silent"}.get(status, status)


# --- the end -----------------------------------------------------------------------------------------------

def finish(run: Run, status: str, last_seq: int = 0, error: str = "", reason: str = "") -> str:
    """End the run `status` (succeeded, failed or cancelled) with its last event; a run that already ended keeps
    how it ended (the same answer to a repeated finish). Points after `stored_through` that `last_seq` says were
    sent and never came are noted in that event. Returns the run's status."""
    with transaction.atomic():
        logged = LoggedRun.objects.select_for_update().get(pk=run.pk)
        run.refresh_from_db()
        if run.status in ENDED:
            return run.status
        seconds = seconds_since_start(run)
        values = {"status": status, "seconds": seconds} if status != Status.FAILED else {
            "error": error or "The script reported a failure."}
        if reason:
            values["reason"] = reason
        if last_seq > logged.stored_through:
            values["missing"] = f"points {logged.stored_through + 1} to {last_seq} never arrived"
        Run.objects.filter(pk=run.pk).update(status=status, finished_at=timezone.now(), heartbeat_at=timezone.now(),
                                             error=values.get("error", ""))
        kind = "failed" if status == Status.FAILED else "finished"
        events = store(run, [make_event(kind, run.steps_done, seconds, values)])
    stream(run.pk, events, ended=True)
    lifecycle.announce_end(run.pk)
    run.refresh_from_db()
    return run.status


def cancel(run: Run) -> str:
    """Cancel on the run's page: the run ends cancelled at once (its script's next request hears 409)."""
    return finish(run, Status.CANCELLED, reason="cancelled on its page")


def explain_silence(sender, run_id: int, status: str, **kwargs) -> None:
    """`run_ended` receiver: a logged run the reaper found silent says so in its script's terms."""
    if status == Status.LOST:
        Run.objects.filter(pk=run_id, experiment__algorithm=LOGGED, status=Status.LOST,
                           error=lifecycle.LOST_ERROR).update(
            error=SILENT_ERROR.format(minutes=settings.LOGGED_RUN_SILENCE_SECONDS / 60))


# --- storing and streaming ---------------------------------------------------------------------------------

def hold(run: Run) -> LoggedRun:
    """Lock the run for this transaction and beat its heart (its script is there); a lost run comes back to
    running. Refused (409) when it ended. The write comes first: SQLite then takes its lock before any read."""
    now = timezone.now()
    Run.objects.filter(pk=run.pk, status__in=(Status.RUNNING, Status.LOST)).update(
        status=Status.RUNNING, heartbeat_at=now, finished_at=None, error="")
    logged = LoggedRun.objects.select_for_update().get(pk=run.pk)
    run.refresh_from_db()
    if run.status != Status.RUNNING:
        raise Refused(409, f"This run has ended ({run.status}): it takes no more points or files.")
    return logged


def store(run: Run, events: list[dict]) -> list[tuple[dict, str]]:
    """Write the events after the run's last one, with the charts' summary and its step count, in the caller's
    transaction; returns them as records (with their seq) and their JSON, for the live stream."""
    if not events:
        return []
    seq = max(run.last_seq, run.stored_seq())  # after every seq a resume forgot (`resume`)
    records = [{"seq": seq + number, **event} for number, event in enumerate(events, start=1)]
    texts = [rows.json_text(record) for record in records]  # the values are finite numbers, or text
    rows.insert(Event, ("seq", "kind", "step", "time", "values"), "[" + ",".join(texts) + "]", run_id=run.pk)
    summarize(run.pk, records)
    step = max(record["step"] for record in records)
    Run.objects.filter(pk=run.pk).update(steps_done=Greatest(F("steps_done"), step),
                                         total_steps=Greatest(F("total_steps"), step))
    return list(zip(records, texts))


_clients: dict[str, redis.Redis] = {}

# The stored events of a request added to the run's stream in one command: an entry `<seq>-0` each (an id the
# stream has already, from a request that raced, is skipped), then the stream trimmed to its tail and its expiry set.
# KEYS[1]: the stream; ARGV: maxlen, the first id kept, the expiry in seconds, then each entry's id and its JSON.
ADD_EVENTS = """
for index = 4, #ARGV, 2 do
    redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], ARGV[index], 'event', ARGV[index + 1])
end
redis.call('XTRIM', KEYS[1], 'MINID', ARGV[2])
return redis.call('EXPIRE', KEYS[1], ARGV[3])
"""


def stream(run_id: int, stored: list[tuple[dict, str]], ended: bool = False) -> None:
    """Add stored events (`store`'s records and their JSON) to the run's live stream, as the worker's sink does
    (id `<seq>-0`, trimmed to a tail, expiring), in one Redis command however many. Redis carries only the live
    view: when it fails, pages read the events from the database."""
    if not stored:
        return
    url = settings.REDIS_URL
    client = _clients.get(url) or _clients.setdefault(url, sink_client())
    last_seq = stored[-1][0]["seq"]
    entries = [part for record, text in stored for part in (f"{record['seq']}-0", text)]
    try:
        client.eval(ADD_EVENTS, 1, stream_key(run_id), STREAM_MAXLEN, f"{max(0, last_seq - STREAM_TAIL) + 1}-0",
                    FINISHED_STREAM_SECONDS if ended else RUNNING_STREAM_SECONDS, *entries)
    except redis.RedisError as error:
        logger.warning("run %s: Redis unavailable (%s); its page reads these events from the database", run_id, error)
