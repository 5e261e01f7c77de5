"""Sweeps: list, create (the new-sweep form's validation and flow) and read. 404 for other users'."""

from __future__ import annotations

from datetime import datetime

from ninja import Field, Router, Schema, Status

from rlweb.api.form_input import form_data, raise_form_errors
from rlweb.api.schemas import Body
from rlweb.projects import access
from rlweb.sweeps import figures, pbt, study
from rlweb.sweeps.forms import SweepForm
from rlweb.sweeps.models import Sweep
from rlweb.sweeps.views import owned_sweep

router = Router(tags=["sweeps"])


class SweepIn(Body):
    """The new-sweep form's fields. Each hyperparameter is a fixed value, a range `LOW:HIGH` or `LOW:HIGH:log`,
    or choices `A|B|C`; those left out start from the preset's values (fixed)."""

    name: str | None = None
    algorithm: str
    env_id: str
    hyperparameters: dict[str, bool | int | float | str] = Field(default_factory=dict)
    preset: str = "auto"
    total_steps: int | None = None
    eval_interval: int | None = None
    eval_episodes: int | None = None
    objective: str | None = None
    last_evaluations: int | None = None
    threshold: float | None = None
    sampler: str | None = None
    seed: int | None = None
    pruner: str | None = None
    pruner_warmup_steps: int | None = None
    trials: int | None = None
    parallel: int | None = None
    seeds_per_trial: int | None = None
    device: str | None = None
    method: str | None = Field(None, description="optuna (default) or pbt: population-based training, whose "
                                                 "population is `trials` (docs/sweeps.md).")
    ready_interval: int | None = Field(None, description="pbt: env steps between the ready points.")
    quantile: float | None = None
    resample_probability: float | None = None
    project: int | None = Field(None, description="A project you own or edit (its members see it); none: private.")


class SweepOut(Schema):
    id: int
    project_id: int | None
    name: str
    algorithm: str
    env_id: str
    preset: str
    fixed: dict
    space: list
    total_steps: int
    eval_interval: int
    eval_episodes: int
    objective: str
    sampler: str
    pruner: str
    trials: int
    parallel: int
    seeds_per_trial: int
    device: str
    method: str
    ready_interval: int | None
    status: str
    created: datetime
    finished_at: datetime | None
    url: str

    @staticmethod
    def resolve_url(sweep) -> str:
        return sweep.get_absolute_url()


class SweepDetail(SweepOut):
    progress: dict = Field(description="The sweep page's live data: trials with their runs and values, the best.")

    @staticmethod
    def resolve_progress(sweep) -> dict:
        return pbt.page_data(sweep) if sweep.is_pbt else figures.page_data(sweep)


@router.get("/sweeps", response=list[SweepOut])
def sweep_list(request):
    """The user's latest 200 sweeps, newest first."""
    return Sweep.objects.filter(access.visible(request.user))[:200]


@router.post("/sweeps", response={201: SweepDetail})
def sweep_create(request, body: SweepIn):
    """Create a sweep and start its first trials; the form's errors by field (422)."""
    fields = body.dict(exclude={"hyperparameters"})
    form = SweepForm(form_data(SweepForm, fields, body.hyperparameters, body.algorithm, body.env_id, body.preset),
                     algorithm=body.algorithm, owner=request.user)
    raise_form_errors(form, body.hyperparameters)  # 422 with every error, when there are any
    sweep = form.save(owner=request.user)
    study.create(sweep)
    sweep.refresh_from_db()
    return Status(201, sweep)


@router.get("/sweeps/{sweep_id}", response=SweepDetail)
def sweep_detail(request, sweep_id: int):
    return owned_sweep(request, sweep_id)
