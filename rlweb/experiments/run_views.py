"""The run page and its endpoints: history, the live stream, downloads. Access goes through views.owned_run."""

from __future__ import annotations

from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, Http404, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render

from rlweb.experiments import live
from rlweb.experiments.history import EVENT_KINDS, history
from rlweb.experiments.models import Checkpoint
from rlweb.experiments.views import owned_run, whole_number


def run_detail(request, run_id: int):
    run = owned_run(request, run_id)
    checkpoints = run.checkpoints.all()
    return render(request, "experiments/run_detail.html", {"run": run, "checkpoints": checkpoints})


def run_events(request, run_id: int):
    run = owned_run(request, run_id)
    try:
        after = whole_number(request.GET.get("after", "0"), "after")
        kinds = tuple(request.GET["kinds"].split(",")) if request.GET.get("kinds") else EVENT_KINDS
        unknown = [kind for kind in kinds if kind not in EVENT_KINDS]
        if unknown:
            raise ValueError(f"unknown event kind {unknown[0][:40]!r}; known: {', '.join(EVENT_KINDS)}")
        full = request.GET.get("full", "0")
        if full not in ("0", "1"):
            raise ValueError("full must be 0 or 1")
    except ValueError as error:
        return JsonResponse({"error": str(error)}, status=400)
    return JsonResponse(history(run, after=after, kinds=kinds, full=full == "1"))


def run_stream(request, run_id: int):
    """Server-sent events from the run's live stream, resuming after `Last-Event-ID` (or `?last_id=`)."""
    run = owned_run(request, run_id)
    try:
        last_seq = whole_number(request.headers.get("Last-Event-ID") or request.GET.get("last_id", "0"), "last_id")
    except ValueError as error:
        return JsonResponse({"error": str(error)}, status=400)
    follow = live.follow_async if isinstance(request, ASGIRequest) else live.follow
    response = StreamingHttpResponse(follow(run.pk, last_seq), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each message on at once
    return response


def checkpoint_download(request, checkpoint_id: int):
    checkpoint = get_object_or_404(Checkpoint.objects.select_related("run"), pk=checkpoint_id,
                                   run__experiment__owner=request.user)
    try:
        file = checkpoint.file.open("rb")
    except FileNotFoundError:
        raise Http404("The checkpoint file is missing from storage.") from None
    return FileResponse(file, as_attachment=True, filename=checkpoint.download_name,
                        content_type="application/zip")

