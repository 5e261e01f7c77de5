"""The API's suites: create with the new-suite form's validation (errors by field, 422), read with the page's
live data, list; 404 for other users'."""

from __future__ import annotations

from rlweb.experiments.models import Run
from rlweb.suites.models import Suite
from tests.web.api_helpers import owner_api, stranger_api  # noqa: F401  (fixtures)

SUITE = {"name": "api suite", "algorithms": ["dqn", "ppo"], "env_ids": ["CartPole-v1", "Acrobot-v1"], "num_seeds": 2,
         "total_steps": 400, "eval_interval": 0, "eval_episodes": 1, "device": "cpu",
         "hyperparameters": {"*": {"hidden_layers": "16"}, "ppo": {"num_envs": 2, "n_steps": 32, "batch_size": 32}}}


def test_create_launches_a_suite_and_reads_it_back(owner, owner_api):
    response = owner_api.post_json("/api/suites", SUITE)
    assert response.status_code == 201, response.content
    answer = response.json()
    suite = Suite.objects.get(pk=answer["id"], owner=owner)
    assert [(task.algorithm, task.env_id) for task in suite.tasks.all()] == [
        ("dqn", "CartPole-v1"), ("ppo", "CartPole-v1"), ("dqn", "Acrobot-v1"), ("ppo", "Acrobot-v1")]
    assert suite.tasks.get(algorithm="ppo", env_id="Acrobot-v1").hyperparameters["n_steps"] == 32
    assert Run.objects.filter(experiment__suite_task__suite=suite).count() == 8
    progress = owner_api.get(f"/api/suites/{suite.pk}").json()["progress"]
    assert len(progress["runs"]) == 8 and progress["aggregates"]["left_out"] == {
        "CartPole-v1": "4 runs without a score yet", "Acrobot-v1": "4 runs without a score yet"}
    assert [item["id"] for item in owner_api.get("/api/suites").json()] == [suite.pk]


def test_bad_values_are_refused_by_field_and_launch_nothing(owner_api):
    response = owner_api.post_json("/api/suites", {**SUITE, "algorithms": ["dqn", "nope"], "num_seeds": 0})
    assert response.status_code == 422
    assert {tuple(error["loc"]) for error in response.json()["detail"]} == {("body", "algorithms"), ("body", "num_seeds")}
    response = owner_api.post_json("/api/suites", {**SUITE, "env_ids": ["Pendulum-v1"], "hyperparameters": {}})
    assert response.status_code == 422
    assert any(error["loc"] == ["body", "env_ids"] and error["msg"].startswith("dqn on Pendulum-v1: ")
               for error in response.json()["detail"])
    bad_value = owner_api.post_json("/api/suites", {**SUITE, "hyperparameters": {"dqn": {"learning_rate": -1}}})
    assert bad_value.status_code == 422 and bad_value.json()["detail"][0]["loc"] == ["body", "hyperparameters"]
    split = owner_api.post_json("/api/suites", {**SUITE, "hyperparameters": {"dqn": {"gamma": "0.9\nppo.gamma=2"}}})
    assert split.status_code == 422
    assert owner_api.post_json("/api/suites", {**SUITE, "speed": "fast"}).status_code == 422
    assert not Suite.objects.exists() and not Run.objects.exists()


def test_a_stranger_gets_404_on_a_suite(owner_api, stranger_api):
    suite_id = owner_api.post_json("/api/suites", {**SUITE, "env_ids": ["CartPole-v1"]}).json()["id"]
    assert stranger_api.get(f"/api/suites/{suite_id}").status_code == 404
    assert stranger_api.get("/api/suites").json() == []
