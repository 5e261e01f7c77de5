"""The API's experiments: list, create and launch with the form's validation, read, cancel, delete."""

from __future__ import annotations

from rlweb.experiments.models import Experiment, Run
from tests.web.api_helpers import owner_api, stranger_api  # noqa: F401  (fixtures)
from tests.web.helpers import TINY_DQN, TINY_STEPS

TINY = {"name": "tiny", "algorithm": "dqn", "env_id": "CartPole-v1", "total_steps": TINY_STEPS, "eval_interval": 200,
        "eval_episodes": 2, "device": "cpu", "hyperparameters": TINY_DQN, "tags": ["api", "tiny"]}


def errors_by_field(response) -> dict:
    return {".".join(map(str, error["loc"][1:])): error["msg"] for error in response.json()["detail"]}


def test_create_launches_one_queued_run_per_seed(owner, owner_api):
    response = owner_api.post_json("/api/experiments", {**TINY, "num_seeds": 2})
    assert response.status_code == 201, response.content
    answer = response.json()
    experiment = Experiment.objects.get(pk=answer["id"], owner=owner)
    assert experiment.tags == ["api", "tiny"]
    assert experiment.hyperparameters["batch_size"] == 16
    assert sorted(experiment.runs.values_list("seed", flat=True)) == [0, 1]
    assert set(experiment.runs.values_list("status", flat=True)) == {Run.Status.QUEUED}
    assert sorted(answer["run_ids"]) == sorted(experiment.runs.values_list("pk", flat=True))
    assert answer["url"] == experiment.get_absolute_url()


def test_left_out_fields_take_the_forms_values_and_the_presets_hyperparameters(owner_api):
    response = owner_api.post_json("/api/experiments", {"algorithm": "dqn", "env_id": "CartPole-v1",
                                                        "total_steps": TINY_STEPS, "eval_interval": 200})
    assert response.status_code == 201, response.content
    experiment = Experiment.objects.get(pk=response.json()["id"])
    assert experiment.name == "CartPole DQN"
    assert experiment.num_seeds == 1
    assert experiment.preset  # dqn has a CartPole preset, recorded as the page does


def test_form_errors_come_back_by_field_and_nothing_is_queued(owner_api):
    response = owner_api.post_json("/api/experiments", {
        **TINY, "total_steps": 0, "hyperparameters": {**TINY_DQN, "learning_rate": -1}})
    assert response.status_code == 422
    errors = errors_by_field(response)
    assert "total_steps" in errors
    assert "hyperparameters.learning_rate" in errors
    assert not Experiment.objects.exists() and not Run.objects.exists()


def test_an_algorithm_that_cannot_act_in_the_environment_is_refused_like_the_form(owner_api):
    response = owner_api.post_json("/api/experiments", {**TINY, "algorithm": "sac", "hyperparameters": {}})
    assert response.status_code == 422
    assert not Experiment.objects.exists()


def test_unknown_fields_and_hyperparameters_are_refused_by_name(owner_api):
    response = owner_api.post_json("/api/experiments", {**TINY, "colour": "red"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "body", "colour"]  # ninja names the parameter, then the field
    response = owner_api.post_json("/api/experiments", {**TINY, "hyperparameters": {"warp_factor": 9}})
    assert response.status_code == 422
    assert "hyperparameters.warp_factor" in errors_by_field(response)
    assert not Experiment.objects.exists()


def test_every_error_comes_back_at_once_and_an_unknown_algorithm_alone_for_its_hyperparameters(owner_api):
    response = owner_api.post_json("/api/experiments", {
        **TINY, "total_steps": 0, "hyperparameters": {**TINY_DQN, "learning_rate": "fast", "warp_factor": 9}})
    assert response.status_code == 422
    assert {"total_steps", "hyperparameters.learning_rate", "hyperparameters.warp_factor"} <= set(
        errors_by_field(response))
    response = owner_api.post_json("/api/experiments", {**TINY, "algorithm": "nope", "hyperparameters": {"x": 1}})
    assert response.status_code == 422
    assert list(errors_by_field(response)) == ["algorithm"]  # not the hyperparameters of an algorithm it is not
    assert not Experiment.objects.exists()


def test_wrong_types_and_bad_json_get_4xx(owner_api):
    assert owner_api.post_json("/api/experiments", {**TINY, "num_seeds": "many"}).status_code == 422
    assert owner_api.post_json("/api/experiments", {**TINY, "tags": "a"}).status_code == 422
    assert owner_api.post_json("/api/experiments", "{not json").status_code == 400
    assert owner_api.post_json("/api/experiments", "[1, 2]").status_code in (400, 422)
    assert not Experiment.objects.exists()


def test_the_same_submission_token_makes_one_experiment(owner_api):
    body = {**TINY, "submission_token": "retry-1"}
    first = owner_api.post_json("/api/experiments", body)
    again = owner_api.post_json("/api/experiments", body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert Experiment.objects.count() == 1


def test_the_site_limit_of_active_runs_is_the_forms(owner_api, settings):
    settings.MAX_ACTIVE_RUNS_PER_USER = 1
    response = owner_api.post_json("/api/experiments", {**TINY, "num_seeds": 2})
    assert response.status_code == 422
    assert "num_seeds" in errors_by_field(response)


def test_the_list_filters_and_pages(owner_api, make_experiment):
    make_experiment(name="alpha", tags=["x"])
    make_experiment(name="beta", algorithm="ppo")
    answer = owner_api.get("/api/experiments").json()
    assert answer["count"] == 2 and {item["name"] for item in answer["items"]} == {"alpha", "beta"}
    assert [item["name"] for item in owner_api.get("/api/experiments?algorithm=ppo").json()["items"]] == ["beta"]
    assert [item["name"] for item in owner_api.get("/api/experiments?tag=x").json()["items"]] == ["alpha"]
    odd = owner_api.get("/api/experiments?status=sideways").json()
    assert odd["count"] == 2 and "sideways" in odd["problems"][0]


def test_cancel_ends_queued_runs(owner_api, queued_run):
    response = owner_api.post(f"/api/experiments/{queued_run.experiment_id}/cancel")
    assert response.json() == {"cancelled": 1, "stopping": 0}
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.CANCELLED


def test_delete_is_refused_while_a_run_is_queued_then_deletes(owner_api, queued_run):
    path = f"/api/experiments/{queued_run.experiment_id}"
    assert owner_api.delete(path).status_code == 409
    assert Experiment.objects.exists()
    owner_api.post(f"{path}/cancel")
    assert owner_api.delete(path).status_code == 204
    assert not Experiment.objects.exists()


def test_a_stranger_gets_404_and_an_empty_list(stranger_api, queued_run):
    path = f"/api/experiments/{queued_run.experiment_id}"
    assert stranger_api.get(path).status_code == 404
    assert stranger_api.post(f"{path}/cancel").status_code == 404
    assert stranger_api.delete(path).status_code == 404
    assert stranger_api.get("/api/experiments").json()["count"] == 0
    queued_run.refresh_from_db()
    assert queued_run.status == Run.Status.QUEUED
