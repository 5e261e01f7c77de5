"""Runs logged from a user's own script (rlweb_client): create one, send its points (sequence-numbered: the server
drops repeats), its videos and checkpoints, finish it, and read how far it is stored to resume after a restart.
The logic is rlweb/logged/runs.py; this module reads the requests and writes the answers. A stranger's run: 404."""

from __future__ import annotations

import functools
import json
from typing import Annotated, Any, Literal

from django.core.exceptions import PermissionDenied
from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from ninja import Field, File, Form, Router, Schema, Status
from ninja.decorators import decorate_view
from ninja.errors import HttpError
from ninja.files import UploadedFile
from pydantic import BaseModel, ConfigDict, field_validator
from typing_extensions import TypedDict  # pydantic reads a TypedDict's config only from this one on Python < 3.12

from rlweb.api.schemas import Body
from rlweb.body_limit import body_bound
from rlweb.experiments import storage_use
from rlweb.experiments.models import LOGGED, Run
from rlweb.logged import runs, tensorboard
from rlweb.logged.models import LoggedRun
from rlweb.projects import access

router = Router(tags=["logged runs"])
LARGEST_NUMBER = 2**62  # seqs and steps: far past any run, within the database's 64-bit columns


class LoggedRunIn(Body):
    experiment: str = Field(min_length=1, max_length=200, description="Runs of one name share an experiment.")
    name: str = Field("", max_length=200, description="The run's label.")
    config: dict[str, Any] = Field(default_factory=dict, description="The script's settings, at most 64 KB as JSON.")
    host: str = Field("", max_length=200)
    command: str = Field("", max_length=10_000)
    git_commit: str = Field("", max_length=64)
    client_version: str = Field("", max_length=50)
    project: int | None = Field(None, description="A project you own or edit: the experiment is made in it (its "
                                                  "members see the run); none: your private space.")

    @field_validator("config")
    @classmethod
    def config_is_small(cls, config: dict) -> dict:
        if len(json.dumps(config, allow_nan=False)) > runs.MAX_CONFIG_BYTES:
            raise ValueError(f"config takes more than {runs.MAX_CONFIG_BYTES // 1024} KB as JSON")
        return config


class Created(Schema):
    id: int
    experiment_id: int
    url: str
    next_seq: int
    points_max_bytes: int = Field(description="The largest body of a points request (RLWEB_LOGGED_POINTS_MAX_MB).")


class Point(TypedDict):
    """One point of a batch: a TypedDict, validated into the plain dict the server stores, not a model (a ninja
    Schema's wrapping validator, for ORM objects, cost 25 µs a point; a model and its `model_dump` 2 µs more than
    this: benchmarks/client_logging.py)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # as Body's
    seq: Annotated[int, Field(ge=1, le=LARGEST_NUMBER)]
    step: Annotated[int, Field(ge=0, le=LARGEST_NUMBER)]
    time: Annotated[float, Field(allow_inf_nan=False, description="Seconds since the run started, on the script's "
                                                                  "clock.")]
    values: Annotated[dict[str, Any], Field(description="Metric name to number; a value that is not finite is "
                                                        "dropped.")]


class PointsIn(BaseModel):
    """A batch of points: a plain pydantic model, not a ninja Schema (Body), whose wrapping validator validates a
    body with unknown fields refused twice, the second time through its getter for ORM objects."""

    model_config = ConfigDict(extra="forbid")  # as Body's
    points: list[Point] = Field(max_length=runs.MAX_POINTS)

    @field_validator("points")
    @classmethod
    def seqs_increase(cls, points: list[Point]) -> list[Point]:
        for before, after in zip(points, points[1:]):
            if after["seq"] <= before["seq"]:
                raise ValueError(f"seqs must increase within a request: {after['seq']} follows {before['seq']}")
        return points


class Dropped(Schema):
    seq: int
    reason: str


class Stored(Schema):
    stored_through: int
    dropped: list[Dropped]


class FileCreated(Schema):
    id: int


class FinishIn(Body):
    status: Literal["succeeded", "failed", "cancelled"]
    last_seq: int = Field(0, ge=0, le=LARGEST_NUMBER)
    error: str = Field("", max_length=10_000)


class Ended(Schema):
    status: str


class LoggedRunOut(Schema):
    id: int
    status: str
    stored_through: int
    url: str
    points_max_bytes: int


def owned_logged_run(request, run_id: int, edit: bool = True) -> Run:
    """The user's logged run, or one of their projects' (rlweb/projects/access.py: with `edit`, 403 for a viewer);
    404 for a run they cannot see, and for a run trained here."""
    run = get_object_or_404(Run.objects.select_related("experiment").filter(access.visible(request.user,
                                                                                           "experiment__")),
                            pk=run_id, experiment__algorithm=LOGGED, logged__isnull=False)
    if edit and not access.can_edit(request.user, run.experiment):
        raise PermissionDenied("A viewer of this project cannot log into its runs.")
    return run


def refused(error: runs.Refused) -> HttpError:
    return HttpError(error.status, error.detail)


def points_max_bytes() -> int:
    return settings.LOGGED_POINTS_MAX_MB * storage_use.MEGABYTE


def larger_body(run):
    """Let a points request be larger than Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB: 5,000 points of 20 metrics
    take about 4 MB), up to its own bound: the body is read here, bounded, before ninja parses it; past the
    bound, 413 naming it."""

    @functools.wraps(run)
    def bounded(request, *args, **kwargs):
        limit = points_max_bytes()
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        body = request.read(limit + 1) if length <= limit else b""
        if length > limit or len(body) > limit:
            return JsonResponse({"detail": f"The points take {storage_use.describe(max(length, len(body)))}; a points "
                                           f"request may take {storage_use.describe(limit)} "
                                           f"(RLWEB_LOGGED_POINTS_MAX_MB). Send fewer points a request."}, status=413)
        request._body = body  # what `request.body` answers: Django's own bound no longer applies to it
        return run(request, *args, **kwargs)

    return bounded


@router.post("", response={201: Created})
def create(request, body: LoggedRunIn):
    """A new run of the experiment named `experiment` (the user's logged experiment of that name, made on first
    use, in `project` when given), running from now on. Points go to `/points` numbered from `next_seq`. 404 for a
    project you are not in, 403 for one you only view."""
    try:
        run = runs.create(request.user, **body.dict())
    except runs.Refused as error:
        raise refused(error) from None
    return Status(201, {"id": run.pk, "experiment_id": run.experiment_id, "next_seq": 1,
                        "url": request.build_absolute_uri(run.get_absolute_url()),
                        "points_max_bytes": points_max_bytes()})


def archive_bound(run):
    """Refuse an upload larger than RLWEB_TENSORBOARD_IMPORT_MAX_MB from its Content-Length, before it is read: under
    WSGI (`manage.py runserver`), where rlweb/body_limit.py, which bounds it under ASGI, is not in front."""

    @functools.wraps(run)
    def bounded(request, *args, **kwargs):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > body_bound(request.path)[0]:
            return JsonResponse({"detail": tensorboard.too_large("The upload", length).detail}, status=413)
        return run(request, *args, **kwargs)

    return bounded


class ImportedRun(Schema):
    id: int
    name: str = Field(description="Its folder's path in the archive (the name given, for a folder of one run).")
    url: str


class Imported(Created):
    runs: list[ImportedRun] = Field(description="Every run made, one per folder holding event files; `id` and `url` "
                                                "above are the first's.")


@router.post("/import-tensorboard", response={201: Imported})
@decorate_view(archive_bound)
def import_tensorboard(request, experiment: str = Form(..., min_length=1, max_length=200),
                       name: str = Form("", max_length=200), file: UploadedFile = File(...)):
    """Finished runs of the logged experiment `experiment` holding the scalars of a TensorBoard log folder, sent as a
    .zip or .tar.gz (`python -m rlweb_client import-tensorboard DIR` makes and sends one): as in TensorBoard, each
    folder holding event files is a run (a `runs/` folder of several makes several), each tag a metric, each step a
    point. 413 past RLWEB_TENSORBOARD_IMPORT_MAX_MB (the archive, or unpacked); 400 for a member outside the folder
    (absolute, `..`), a link, or no scalars."""
    try:
        made = tensorboard.import_archive(request.user, experiment, file, name=name)
    except runs.Refused as error:
        raise refused(error) from None
    first = made[0]
    return Status(201, {"id": first.pk, "experiment_id": first.experiment_id,
                        "next_seq": first.logged.stored_through + 1,
                        "url": request.build_absolute_uri(first.get_absolute_url()),
                        "points_max_bytes": points_max_bytes(),
                        "runs": [{"id": run.pk, "name": run.logged.name,
                                  "url": request.build_absolute_uri(run.get_absolute_url())} for run in made]})


class ResumeIn(Body):
    from_step: int | None = Field(None, ge=0, le=LARGEST_NUMBER, description=(
        "The env step the script goes on from (its checkpoint's): what the run logged past it (points, videos, "
        "checkpoints) is forgotten. None: everything is kept, and the script goes on after it."))
    host: str = Field("", max_length=200)
    command: str = Field("", max_length=10_000)
    git_commit: str = Field("", max_length=64)
    client_version: str = Field("", max_length=50)


class Resumed(Created):
    step: int = Field(description="The step the run goes on from.")
    seconds: float = Field(description="The time of its last event kept, in seconds since it started: the script's "
                                       "clock goes on from there.")


@router.post("/{run_id}/resume", response=Resumed)
def resume(request, run_id: int, body: ResumeIn):
    """Go on logging into the run from a script started again (after a crash, a preemption, or to train longer),
    whatever the run's status: it is running again, its log says so, and its points go on from `next_seq`. 404
    for a run that is not yours (or not logged), 403 for a project you only view."""
    run = owned_logged_run(request, run_id)
    where = runs.resume(run, **body.dict())
    return {"id": run.pk, "experiment_id": run.experiment_id, "url": request.build_absolute_uri(run.get_absolute_url()),
            "points_max_bytes": points_max_bytes(), **where}


@router.get("/{run_id}", response=LoggedRunOut)
def detail(request, run_id: int):
    """Its status and the highest point seq stored: a restarted script sends the points after it."""
    run = owned_logged_run(request, run_id, edit=False)
    return {"id": run.pk, "status": run.status, "stored_through": LoggedRun.objects.get(pk=run.pk).stored_through,
            "url": request.build_absolute_uri(run.get_absolute_url()), "points_max_bytes": points_max_bytes()}


@router.post("/{run_id}/points", response=Stored)
@decorate_view(larger_body)
def points(request, run_id: int, body: PointsIn):
    """Store points after the highest seq stored (at most 5,000 a request, seqs increasing, a body of at most
    RLWEB_LOGGED_POINTS_MAX_MB: `points_max_bytes` in the create answer; past it, 413); earlier ones are repeats,
    dropped. Values that are not finite numbers, and names that are too long or use other characters than
    letters, digits, spaces and `_ . / -`, are dropped one by one; `dropped` says why. 409 once the run ended."""
    run = owned_logged_run(request, run_id)
    try:
        through, dropped = runs.add_points(run, body.points)
    except runs.Refused as error:
        raise refused(error) from None
    return {"stored_through": through, "dropped": dropped}


@router.post("/{run_id}/files", response={201: FileCreated})
def upload(request, run_id: int, kind: Literal["video", "checkpoint"] = Form(...),
           step: int = Form(..., ge=0, le=LARGEST_NUMBER), file: UploadedFile = File(...)):
    """An episode video (mp4) or a checkpoint file of the run at env step `step`; 413 past
    RLWEB_LOGGED_FILE_MAX_MB or the user's storage quota."""
    run = owned_logged_run(request, run_id)
    try:
        return Status(201, {"id": runs.add_file(run, kind, step, file)})
    except runs.Refused as error:
        raise refused(error) from None


@router.post("/{run_id}/finish", response=Ended)
def finish(request, run_id: int, body: FinishIn):
    """End the run; a run that has ended already answers how it ended (finishing twice is harmless)."""
    run = owned_logged_run(request, run_id)
    return {"status": runs.finish(run, body.status, last_seq=body.last_seq, error=body.error)}
