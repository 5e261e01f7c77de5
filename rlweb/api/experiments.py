"""Experiments: list, create and launch (the new-experiment form's validation and flow), read, cancel, delete.
Every object is fetched through the pages' access helper (404 for other users')."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from rlweb.api.form_input import form_data, raise_form_errors
from rlweb.api.schemas import Body, ExperimentOut
from rlweb.experiments import lifecycle, lists
from rlweb.experiments.forms import ExperimentForm
from rlweb.experiments.models import Run
from rlweb.experiments.views import owned_experiment
from rlweb.logged import runs as logged_runs

router = Router(tags=["experiments"])

Scalar = bool | int | float | str


class ExperimentIn(Body):
    """The new-experiment form's fields; what is left out takes the form's initial value, and hyperparameters
    left out the preset's (or with `preset: "none"`, the algorithm's defaults)."""

    name: str | None = Field(None, description="Default: the environment and algorithm, as the form suggests.")
    algorithm: str
    env_id: str
    hyperparameters: dict[str, Scalar] = Field(default_factory=dict)
    preset: str = Field("auto", description="A preset's name, `auto` (the environment's) or `none`.")
    num_seeds: int | None = None
    total_steps: int | None = None
    eval_interval: int | None = None
    eval_episodes: int | None = None
    checkpoint_interval: int | None = None
    keep_checkpoints: int | None = None
    video_interval: int | None = None
    device: str | None = None
    auto_resume: bool | None = None
    max_auto_resumes: int | None = None
    tags: list[str] = Field(default_factory=list)
    description: str | None = None
    project: int | None = Field(None, description="A project you own or edit (its members see it); none: private.")
    submission_token: str | None = Field(None, description="Any text up to 64 characters: a create repeated with the "
                                                           "same token answers the experiment the first one made.")


class ListFilters(Schema):
    q: str = ""
    status: str = ""
    algorithm: str = ""
    env: str = ""
    tag: str = ""
    project: str = Field("", description="A project's id: only its experiments.")
    sort: str = ""
    page: int = Field(1, ge=1, le=10**9)


class ExperimentPage(Schema):
    items: list[ExperimentOut]
    page: int
    pages: int
    count: int
    problems: list[str]  # filters that made no sense, ignored (as the list page's messages say)


def page_answer(request, rows, query) -> dict:
    page = lists.page_of(rows, request.GET)
    return {"items": list(page), "page": page.number, "pages": page.paginator.num_pages,
            "count": page.paginator.count, "problems": query.problems}


@router.get("/experiments", response=ExperimentPage)
def experiment_list(request, filters: Query[ListFilters]):
    """The user's experiments (a sweep's trials are on the sweep), 25 a page, filtered and sorted as on `/`."""
    query = lists.read_query(request.GET, lists.EXPERIMENT_SORTS, default_sort="-created")
    return page_answer(request, lists.experiments_for(request.user, query).prefetch_related("runs"), query)


@router.post("/experiments", response={200: ExperimentOut, 201: ExperimentOut})
def experiment_create(request, body: ExperimentIn):
    """Create an experiment and launch its runs, one per seed: the new-experiment form's checks, its errors by
    field (422). 201 with the experiment; 200 with the earlier one when `submission_token` was seen before."""
    fields = body.dict(exclude={"hyperparameters", "tags"})
    fields["tags"] = ", ".join(body.tags)
    form = ExperimentForm(form_data(ExperimentForm, fields, body.hyperparameters, body.algorithm, body.env_id,
                                    body.preset), algorithm=body.algorithm, owner=request.user)
    raise_form_errors(form, body.hyperparameters)  # 422 with every error, when there are any
    earlier = form.earlier_submission(request.user)
    if earlier:
        return Status(200, earlier)
    try:
        with transaction.atomic():
            experiment = form.save(owner=request.user)
            lifecycle.launch(experiment)
    except IntegrityError:  # the same token, posted at the same moment, made it first
        earlier = form.earlier_submission(request.user)
        if earlier is None:
            raise
        return Status(200, earlier)
    return Status(201, experiment)


@router.get("/experiments/{experiment_id}", response=ExperimentOut)
def experiment_detail(request, experiment_id: int):
    return owned_experiment(request, experiment_id)


class CancelOut(Schema):
    cancelled: int  # queued runs, ended at once
    stopping: int  # running runs, ending with a final checkpoint


@router.post("/experiments/{experiment_id}/cancel", response=CancelOut)
def experiment_cancel(request, experiment_id: int):
    """Cancel every queued or running run of the experiment."""
    experiment = owned_experiment(request, experiment_id, edit=True)
    cancel = logged_runs.cancel if experiment.is_logged else lifecycle.cancel  # a logged run ends at once
    outcomes = [cancel(run) for run in experiment.runs.filter(status__in=Run.ACTIVE)]
    return {"cancelled": outcomes.count(Run.Status.CANCELLED), "stopping": outcomes.count("stopping")}


@router.delete("/experiments/{experiment_id}", response={204: None})
def experiment_delete(request, experiment_id: int):
    """Delete the experiment with its runs and files; 409 while a run is queued or running (cancel it first)."""
    active = lifecycle.delete_experiment(owned_experiment(request, experiment_id, edit=True))
    if active:
        raise HttpError(409, f"Not deleted: cancel its queued or running runs first ({active} left).")
    return Status(204, None)
