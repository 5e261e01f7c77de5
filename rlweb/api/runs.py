"""Runs: list with filters, read, cancel, resume, change live hyperparameters; their metrics (downsampled as the
run page draws them, or every stored event a page at a time), log, checkpoints and videos, and the files
themselves. Every object is fetched through the pages' access helpers (404 for other users')."""

from __future__ import annotations

import redis
from django.shortcuts import get_object_or_404
from django.urls import reverse
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from rlweb.api.experiments import ListFilters, page_answer
from rlweb.api.form_input import field_text, raise_form_errors
from rlweb.api.schemas import Body, RunOut
from rlweb.experiments import files, history, lifecycle, lists
from rlweb.experiments.forms import HYPERPARAMETER_PREFIX
from rlweb.experiments.live_changes import LiveChangeForm, request_change
from rlweb.experiments.models import Checkpoint, Run, Video
from rlweb.experiments.views import LOGGED_ONLY, owned_run
from rlweb.logged import runs as logged_runs
from rlweb.projects import access

router = Router(tags=["runs"])
BIGGEST_ID = 2**63 - 1  # what a database column holds


class RunFilters(ListFilters):
    experiment: int | None = Field(None, ge=1, le=BIGGEST_ID, description="Only this experiment's runs.")


class RunPage(Schema):
    items: list[RunOut]
    page: int
    pages: int
    count: int
    problems: list[str]


@router.get("/runs", response=RunPage)
def run_list(request, filters: Query[RunFilters]):
    """The user's runs, 25 a page, filtered (status, algorithm, env, tag, q, experiment) and sorted as on /runs/."""
    query = lists.read_query(request.GET, lists.RUN_SORTS, default_sort="-run")
    rows = lists.runs_for(request.user, query)
    if filters.experiment is not None:
        rows = rows.filter(experiment_id=filters.experiment)
    return page_answer(request, rows, query)


@router.get("/runs/{run_id}", response=RunOut)
def run_detail(request, run_id: int):
    return owned_run(request, run_id)


class Outcome(Schema):
    outcome: str


@router.post("/runs/{run_id}/cancel", response=Outcome)
def run_cancel(request, run_id: int):
    """`cancelled` (it had not started), `stopping` (it saves a final checkpoint, then ends cancelled) or `ended`
    (it had already ended). A run logged from a script ends cancelled at once; its script hears 409."""
    run = owned_run(request, run_id, edit=True)
    if run.experiment.is_logged:
        ended = run.status in logged_runs.ENDED
        return {"outcome": "ended" if ended or logged_runs.cancel(run) != Run.Status.CANCELLED else "cancelled"}
    return {"outcome": lifecycle.cancel(run)}


@router.post("/runs/{run_id}/resume", response=Outcome)
def run_resume(request, run_id: int):
    """Queue a cancelled or lost run again from its latest checkpoint; 409 for any other, for a logged run, and when
    the owner's storage is full or the run asks for more than the site now allows (the reason in `detail`)."""
    run = owned_run(request, run_id, edit=True)
    if run.experiment.is_logged:
        raise HttpError(409, LOGGED_ONLY)
    refusal = lifecycle.resume_refusal(run) if run.is_resumable else None
    if refusal:
        raise HttpError(409, refusal)
    if not lifecycle.resume(run):
        raise HttpError(409, f"Only a cancelled or lost run can be resumed; this one is {run.status}.")
    return {"outcome": "queued"}


class ChangeIn(Body):
    values: dict[str, bool | int | float | str] = Field(description="Live hyperparameters and their new values.")


@router.post("/runs/{run_id}/hyperparameters", response=dict)
def run_change(request, run_id: int, body: ChangeIn):
    """Change live hyperparameters of a running run, checked as on its page (errors by field, 422); 409 when it
    is not running or logged from a script, 503 when its worker cannot be reached. Answers the recorded change."""
    run = owned_run(request, run_id, edit=True)
    if run.experiment.is_logged:
        raise HttpError(409, LOGGED_ONLY)
    if run.status != Run.Status.RUNNING:
        raise HttpError(409, f"Only a running run takes changes; this one is {run.status}.")
    form = LiveChangeForm(run, {HYPERPARAMETER_PREFIX + name: field_text(value) for name, value in body.values.items()})
    if not form.is_valid():
        raise_form_errors(form)
    try:
        return {"change": request_change(run, form.cleaned_data["changes"])}
    except redis.RedisError as error:
        raise HttpError(503, f"The worker cannot be reached (Redis: {error}); nothing was changed.") from None


@router.get("/runs/{run_id}/metrics", response=dict)
def run_metrics(request, run_id: int):
    """Every metric downsampled as the run page draws it: {key: {step, time, value[, low, high], count,
    through_seq}}, and `last_seq`. For every value, page through /events."""
    run = owned_run(request, run_id)
    last_seq = history.last_stored_seq(run)
    return {"run": history.run_summary(run), "last_seq": last_seq, "metrics": history.metric_series(run)}


class EventQuery(Schema):
    after: int = Field(0, ge=0, le=BIGGEST_ID, description="The seq to continue after (`next_after` of the previous page).")
    limit: int = Field(history.PAGE_SIZE, ge=1, le=history.PAGE_SIZE)
    kinds: str = Field("", description=f"Comma-separated, of {', '.join(history.EVENT_KINDS)}; default all.")


@router.get("/runs/{run_id}/events", response=dict)
def run_events(request, run_id: int, query: Query[EventQuery]):
    """The stored events, not downsampled, in seq order, a page at a time: `next_after` continues (null at the
    end). Metric values are in the `episode`, `train`, `eval` and `time` events."""
    run = owned_run(request, run_id)
    kinds = tuple(query.kinds.split(",")) if query.kinds else history.EVENT_KINDS
    unknown = [kind for kind in kinds if kind not in history.EVENT_KINDS]
    if unknown:
        raise HttpError(400, f"kinds: unknown event kind {unknown[0][:40]!r}; known: {', '.join(history.EVENT_KINDS)}")
    return history.events(run, after=query.after, kinds=kinds, limit=query.limit)


@router.get("/runs/{run_id}/log", response=list[dict])
def run_log(request, run_id: int):
    """The latest lifecycle and evaluation events (the run page's log), oldest first."""
    run = owned_run(request, run_id)
    return history.log_events(run, history.last_stored_seq(run))


class FileOut(Schema):
    id: int
    step: int
    tag: str | None = None
    episode_return: float | None = None
    download_url: str


@router.get("/runs/{run_id}/checkpoints", response=list[FileOut])
def run_checkpoints(request, run_id: int):
    return [{"id": item["id"], "step": item["step"], "tag": item["tag"],
             "download_url": reverse("api-1:checkpoint_download", args=[item["id"]])}
            for item in history.checkpoint_list(owned_run(request, run_id))]


@router.get("/runs/{run_id}/videos", response=list[FileOut])
def run_videos(request, run_id: int):
    """Newest first."""
    return [{"id": item["id"], "step": item["step"], "episode_return": item["episode_return"],
             "download_url": reverse("api-1:video_download", args=[item["id"]])}
            for item in history.video_list(owned_run(request, run_id))]


@router.get("/checkpoints/{checkpoint_id}/download", response={200: bytes}, tags=["files"])
def checkpoint_download(request, checkpoint_id: int):
    """The checkpoint's zip (config.json and model.safetensors); `Range` asks for part of it."""
    checkpoint = get_object_or_404(Checkpoint.objects.filter(access.visible(request.user, "run__experiment__")),
                                   pk=checkpoint_id)
    return files.serve(request, checkpoint.file, checkpoint.download_name, "application/zip", as_attachment=True)


@router.get("/videos/{video_id}/download", response={200: bytes}, tags=["files"])
def video_download(request, video_id: int):
    """The episode video (mp4); `Range` asks for part of it."""
    video = get_object_or_404(Video.objects.filter(access.visible(request.user, "run__experiment__")), pk=video_id)
    return files.serve(request, video.file, f"run{video.run_id}-step{video.step}.mp4", "video/mp4",
                       as_attachment=True)
