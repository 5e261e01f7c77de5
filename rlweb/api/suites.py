"""Suites: list, create (the new-suite form's validation and flow) and read with the page's live data (runs,
scores, aggregates across tasks). 404 for other users'."""

from __future__ import annotations

from datetime import datetime

from ninja import Field, Router, Schema, Status
from ninja.errors import ValidationError

from rlweb.api.schemas import Body
from rlweb.projects import access
from rlweb.suites import launching
from rlweb.suites.forms import SuiteForm
from rlweb.suites.models import Suite
from rlweb.suites.views import owned_suite, page_data

router = Router(tags=["suites"])
API_NAMES = {"overrides": "hyperparameters"}  # the form's field -> the body's


class SuiteIn(Body):
    """The new-suite form's fields; those left out take the form's initial values."""

    name: str | None = None
    algorithms: list[str]
    env_list: str | None = Field(None, description="classic, box2d, mujoco or atari5: stands in for empty env_ids.")
    env_ids: list[str] = Field(default_factory=list)
    num_seeds: int | None = None
    total_steps: int | None = None
    eval_interval: int | None = None
    eval_episodes: int | None = None
    device: str | None = None
    use_presets: bool = True
    hyperparameters: dict[str, dict[str, bool | int | float | str]] = Field(
        default_factory=dict, description="{algorithm or '*': {name: value}} on top of the presets.")
    project: int | None = Field(None, description="A project you own or edit (its members see it); none: private.")


class SuiteOut(Schema):
    id: int
    project_id: int | None
    name: str
    algorithms: list[str]
    env_ids: list[str]
    num_seeds: int
    total_steps: int
    eval_interval: int
    eval_episodes: int
    device: str
    status: str
    created: datetime
    finished_at: datetime | None
    url: str

    @staticmethod
    def resolve_url(suite) -> str:
        return suite.get_absolute_url()


class SuiteDetail(SuiteOut):
    progress: dict = Field(description="The suite page's live data: runs with their states and scores, the score "
                                       "table, and the aggregates across tasks per algorithm.")

    @staticmethod
    def resolve_progress(suite) -> dict:
        return page_data(suite, "final")


def form_data(body: SuiteIn) -> dict:
    """What the browser would post: the form's initial values under the body's."""
    data = {name: field.initial for name, field in SuiteForm.base_fields.items()
            if field.initial is not None and not callable(field.initial)}
    data.update({name: value for name, value in body.dict(exclude={"hyperparameters", "env_ids"}).items()
                 if value is not None})
    data["use_presets"] = body.use_presets
    data["env_ids"] = "\n".join(str(env_id) for env_id in body.env_ids)
    lines = [(target, name, str(value)) for target, values in body.hyperparameters.items()
             for name, value in values.items()]
    if any("\n" in text or "\r" in text for line in lines for text in line):
        raise ValidationError([{"loc": ["body", "hyperparameters"], "type": "form",
                                "msg": "Names and values are on one line each: no line breaks."}])
    data["overrides"] = "\n".join(f"{'' if target == '*' else target + '.'}{name}={value}"
                                  for target, name, value in lines)
    if body.env_list is None:
        data["env_list"] = ""
    return data


@router.get("/suites", response=list[SuiteOut])
def suite_list(request):
    """The user's latest 200 suites, newest first."""
    return Suite.objects.filter(access.visible(request.user))[:200]


@router.post("/suites", response={201: SuiteDetail})
def suite_create(request, body: SuiteIn):
    """Create a suite and launch the tasks that fit the limit of runs; the form's errors by field (422)."""
    form = SuiteForm(form_data(body), owner=request.user)
    if not form.is_valid():
        raise ValidationError([{"loc": ["body"] if name == "__all__" else ["body", API_NAMES.get(name, name)],
                                "msg": str(message), "type": "form"}
                               for name, messages in form.errors.items() for message in messages])
    suite = form.save(owner=request.user)
    launching.advance(suite.pk)
    suite.refresh_from_db()
    return Status(201, suite)


@router.get("/suites/{suite_id}", response=SuiteDetail)
def suite_detail(request, suite_id: int):
    return owned_suite(request, suite_id)
