"""The run page and its endpoints: history, the live stream, the CSV of every event, checkpoint and video
files. Every object is fetched through an access helper that answers 404 for other users' runs."""

from __future__ import annotations

import csv

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from rlweb.experiments import checkpoint_jobs, files, history, live, queues
from rlweb.experiments.checkpoint_jobs import CheckpointJobForm
from rlweb.experiments.models import Checkpoint, CheckpointJob, Run, Video
from rlweb.experiments.rows import json_text
from rlweb.experiments.views import owned_run, whole_number
from rlweb.projects import access

LOGGED_CHECKPOINTS = ("This run was logged from a script: its checkpoints are files the script saved, to download; "
                      "a worker can evaluate only checkpoints trained here.")


def run_detail(request, run_id: int):
    run = owned_run(request, run_id)
    return render(request, "experiments/run_detail.html", {
        "run": run, "experiment": run.experiment, "hyperparameters": sorted(run.experiment.hyperparameters.items()),
        "checkpoints": run.current_checkpoints(), "videos": history.video_list(run), "duration": duration_text(run),
        "queue_place": queues.queue_places([run]).get(run.pk), "job_form": CheckpointJobForm(run),
        **jobs_context(run, request.user)})


def jobs_context(run, user) -> dict:
    """The run's latest checkpoint jobs, for _checkpoint_jobs.html, and whether `user` may act on the run (a project's
    viewer sees no buttons)."""
    jobs = list(CheckpointJob.objects.filter(checkpoint__run=run).select_related("checkpoint", "video")[:20])
    return {"jobs": jobs, "jobs_unfinished": any(not job.is_finished for job in jobs),
            "can_edit": access.can_edit(user, run.experiment)}


@require_http_methods(["GET", "POST"])
def run_jobs(request, run_id: int):
    """The run's checkpoint jobs: GET, the list as HTML (the page refreshes it while one is unfinished); POST,
    a new job from the "Act on a checkpoint" form. The page's script gets JSON (the errors by field, 400);
    a plain form post gets a message and the run page back."""
    run = owned_run(request, run_id, edit=request.method == "POST")
    if request.method == "GET":
        return render(request, "experiments/_checkpoint_jobs.html", {"run": run, **jobs_context(run, request.user)})
    form = CheckpointJobForm(run, request.POST)
    if run.experiment.is_logged:  # its checkpoints are whatever its script saved: no worker can load them
        answer, status = {"errors": {"": [LOGGED_CHECKPOINTS]}}, 409
    elif form.is_valid():
        checkpoint_jobs.ask(form.cleaned_data["checkpoint"], form.cleaned_data["kind"],
                            form.cleaned_data["episodes"] or 1)
        answer, status = {}, 200
    else:
        answer, status = {"errors": {name if name != "__all__" else "": list(errors)
                                     for name, errors in form.errors.items()}}, 400
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse(answer, status=status)
    if status == 200:
        messages.success(request, "Asked: a worker does it; the result appears under Checkpoints.")
    for name, errors in answer.get("errors", {}).items():
        for message in errors:
            messages.error(request, f"{name}: {message}".lstrip(": "))
    return redirect(run.get_absolute_url() + "#checkpoint-jobs")


CANCEL_MESSAGES = {
    CheckpointJob.Status.CANCELLED: "Cancelled before a worker took it.",
    "stopping": "Stopping: its worker ends it within a second.",
}


@require_POST
def run_job_cancel(request, run_id: int):
    """Cancel one of the run's checkpoint jobs (`job`, its Cancel button). The page's script gets JSON {"outcome":
    "cancelled" | "stopping" | "ended"} and fetches the list again; a plain form post gets a message and the run
    page back."""
    run = owned_run(request, run_id, edit=True)
    job_id = request.POST.get("job", "")
    job = get_object_or_404(CheckpointJob, pk=int(job_id) if job_id.isdigit() else 0, checkpoint__run=run)
    outcome = checkpoint_jobs.cancel(job)
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse({"outcome": outcome})
    messages.info(request, CANCEL_MESSAGES.get(outcome, f"This job has already ended ({job.status})."))
    return redirect(run.get_absolute_url() + "#checkpoint-jobs")


def duration_text(run) -> str:
    """How long the run has trained over all its attempts ("running for ..." while it runs), as
    run_detail.js writes it at the end."""
    seconds = run.training_seconds
    if seconds is None:
        return "–"
    if seconds < 60:
        text = f"{seconds:.1f} s"
    elif seconds < 3600:
        text = f"{int(seconds // 60)} min {round(seconds % 60)} s"
    else:
        text = f"{int(seconds // 3600)} h {round(seconds % 3600 / 60)} min"
    if run.attempts > 1:
        text += f" over {run.attempts} attempts"
    return f"running for {text}" if run.started_at and not run.finished_at else text


def run_q_table(request, run_id: int):
    """The Q-table of a tabular run's latest checkpoint, laid out for a heatmap (`value_map`)."""
    run = owned_run(request, run_id)
    checkpoint = run.latest_checkpoint()
    if checkpoint is None:
        return JsonResponse({"error": "No checkpoint yet: the table appears with the run's first one."}, status=404)
    try:
        agent = checkpoint.load_agent()
    except (OSError, ValueError) as error:
        return JsonResponse({"error": f"The checkpoint cannot be read: {error}"}, status=404)
    value_map = agent.value_map() if hasattr(agent, "value_map") else None
    if value_map is None:
        return JsonResponse({"error": "Only tabular runs with one- or two-dimensional states have a table to draw."},
                            status=404)
    return JsonResponse({"step": checkpoint.step, "tag": checkpoint.tag, **value_map})


def run_history(request, run_id: int):
    """What the run page draws first: downsampled metrics, the log, checkpoints, videos, `last_seq` (its 100 KB of
    JSON made by orjson: 2 ms less than JsonResponse, which a page opened beside 10,000 points a second waits for)."""
    return HttpResponse(json_text(history.history(owned_run(request, run_id))), content_type="application/json")


def run_events(request, run_id: int):
    """The stored events, not downsampled, a page at a time (`after`, `kinds`, `limit`)."""
    run = owned_run(request, run_id)
    try:
        after = whole_number(request.GET.get("after", "0"), "after")
        limit = whole_number(request.GET.get("limit", str(history.PAGE_SIZE)), "limit")
        if not 1 <= limit <= history.PAGE_SIZE:
            raise ValueError(f"limit must be between 1 and {history.PAGE_SIZE}")
        kinds = tuple(request.GET["kinds"].split(",")) if request.GET.get("kinds") else history.EVENT_KINDS
        unknown = [kind for kind in kinds if kind not in history.EVENT_KINDS]
        if unknown:
            raise ValueError(f"unknown event kind {unknown[0][:40]!r}; known: {', '.join(history.EVENT_KINDS)}")
    except ValueError as error:
        return JsonResponse({"error": str(error)}, status=400)
    return JsonResponse(history.events(run, after=after, kinds=kinds, limit=limit))


class Echo:
    """A file-like object whose write returns the line, for csv.writer in a streaming response."""

    def write(self, line: str) -> str:
        return line


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what spreadsheets read as the start of a formula (OWASP)


def spreadsheet_safe(row: list) -> list:
    """`row` with every text cell that a spreadsheet would run as a formula shown as text (a leading ');
    numbers stay numbers."""
    return [f"'{cell}" if isinstance(cell, str) and cell.startswith(FORMULA_STARTS) else cell for cell in row]


CSV_ROWS_PER_CHUNK = 2_000


def csv_chunks(run):
    """The CSV text of `history.csv_rows`, a few thousand rows at a time."""
    writer = csv.writer(Echo())
    chunk = []
    for row in history.csv_rows(run):
        chunk.append(writer.writerow(spreadsheet_safe(row)))
        if len(chunk) == CSV_ROWS_PER_CHUNK:
            yield "".join(chunk)
            chunk = []
    yield "".join(chunk)


async def csv_chunks_async(run):
    """The same chunks for ASGI, which would otherwise read a sync iterator to the end before sending."""
    chunks = csv_chunks(run)
    next_chunk = sync_to_async(lambda: next(chunks, None))  # thread-sensitive: one thread, one cursor
    while (chunk := await next_chunk()) is not None:
        yield chunk


def run_csv(request, run_id: int):
    """Every stored event as one CSV row (a column per metric key), streamed."""
    run = owned_run(request, run_id)
    chunks = csv_chunks_async(run) if isinstance(request, ASGIRequest) else csv_chunks(run)
    response = StreamingHttpResponse(chunks, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run{run.pk}-events.csv"'
    return response


def run_stream(request, run_id: int):
    """Server-sent events from the run's live stream, resuming after `Last-Event-ID` (or `?last_id=`)."""
    run = owned_run(request, run_id)
    try:
        last_seq = whole_number(request.headers.get("Last-Event-ID") or request.GET.get("last_id", "0"), "last_id")
    except ValueError as error:
        return JsonResponse({"error": str(error)}, status=400)
    response = StreamingHttpResponse(live.follow(run.pk, last_seq), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each message on at once
    return response


def runs_stream(request):
    """Server-sent events of several of the user's runs over one connection, each from its own seq
    (`?runs=RUN:SEQ,RUN:SEQ`, a run without `:SEQ` from its start): every event names its run. The run pages of a
    browser follow their runs through it together (live_worker.js), as the browser opens at most 6 connections to
    a site. 404 if any of the runs is not the user's."""
    try:
        positions = {}
        for item in filter(None, request.GET.get("runs", "").split(",")):
            run_id, _, seq = item.partition(":")
            positions[whole_number(run_id, "a run id")] = whole_number(seq or "0", "a seq")
        if not 1 <= len(positions) <= live.MAX_FOLLOWED_RUNS:
            raise ValueError(f"runs: follow 1 to {live.MAX_FOLLOWED_RUNS} runs, as RUN:SEQ,RUN:SEQ")
    except ValueError as error:
        return JsonResponse({"error": str(error)}, status=400)
    owned = Run.objects.filter(access.visible(request.user, "experiment__"), pk__in=positions).count()
    if owned != len(positions):
        raise Http404("No such run.")
    response = StreamingHttpResponse(live.follow_runs(positions), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each message on at once
    return response


def checkpoint_download(request, checkpoint_id: int):
    checkpoint = get_object_or_404(Checkpoint.objects.filter(access.visible(request.user, "run__experiment__")), pk=checkpoint_id)
    return files.serve(request, checkpoint.file, checkpoint.download_name, "application/zip", as_attachment=True)


def video_file(request, video_id: int):
    """An episode video for a `<video>` element: the whole mp4, or the byte range the browser asks for."""
    video = get_object_or_404(Video.objects.filter(access.visible(request.user, "run__experiment__")), pk=video_id)
    return files.serve(request, video.file, f"run{video.run_id}-step{video.step}.mp4", "video/mp4",
                       as_attachment=False)
