"""What the API's endpoints answer, and the base of the bodies they take (unknown fields refused)."""

from __future__ import annotations

from datetime import datetime

from ninja import Schema
from pydantic import ConfigDict


class Body(Schema):
    """A request body: a field it does not declare is an error naming that field, never ignored."""

    model_config = ConfigDict(extra="forbid")


class Detail(Schema):
    detail: str


class ExperimentOut(Schema):
    id: int
    project_id: int | None  # shared with that project's members; None: private
    name: str
    algorithm: str
    env_id: str
    preset: str
    hyperparameters: dict
    total_steps: int
    eval_interval: int
    eval_episodes: int
    checkpoint_interval: int
    keep_checkpoints: int
    video_interval: int
    num_seeds: int
    device: str
    auto_resume: bool
    max_auto_resumes: int
    tags: list[str]
    description: str
    notes: str
    created: datetime
    url: str
    run_ids: list[int]

    @staticmethod
    def resolve_url(experiment) -> str:
        return experiment.get_absolute_url()

    @staticmethod
    def resolve_run_ids(experiment) -> list[int]:
        return [run.pk for run in experiment.runs.all()]


class RunOut(Schema):
    id: int
    experiment_id: int
    experiment_name: str
    algorithm: str
    env_id: str
    seed: int
    status: str  # as the pages show it: a running run whose worker went silent is "lost"
    steps_done: int
    total_steps: int
    created: datetime
    first_started_at: datetime | None
    finished_at: datetime | None
    attempts: int
    worker_host: str
    device_used: str
    eval_return_mean: float | None
    best_eval_return: float | None
    error: str
    notes: str
    live_changes: list
    # what made its latest attempt (trainer/provenance.py); {} before a worker started it, and for a logged run
    environment: dict
    url: str

    @staticmethod
    def resolve_experiment_name(run) -> str:
        return run.experiment.name

    @staticmethod
    def resolve_algorithm(run) -> str:
        return run.experiment.algorithm

    @staticmethod
    def resolve_env_id(run) -> str:
        return run.experiment.env_id

    @staticmethod
    def resolve_status(run) -> str:
        return run.shown_status

    @staticmethod
    def resolve_url(run) -> str:
        return run.get_absolute_url()
