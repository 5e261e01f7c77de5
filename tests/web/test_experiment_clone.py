"""Cloning an experiment: the new-experiment form, filled with every value of the original, hyperparameters
included, under the name "… (copy)"; launching it makes a new experiment and leaves the original alone."""

import re

import trainer
from django.urls import reverse

from rlweb.experiments.models import Experiment
from tests.web.test_experiment_new import field_block


def clone_url(experiment) -> str:
    return reverse("experiment-clone", args=[experiment.pk])


def posted_values(html: str) -> dict:
    """What the browser would post for the form as rendered: text inputs, selected options, checked boxes."""
    values = {}
    for tag in re.findall(r"<input [^>]*>", html):
        name = re.search(r'name="([^"]+)"', tag)
        if not name or 'type="submit"' in tag:
            continue
        if 'type="checkbox"' in tag:
            if " checked" in tag:
                values[name.group(1)] = "on"
            continue
        value = re.search(r'value="([^"]*)"', tag)
        values[name.group(1)] = value.group(1) if value else ""
    for name, body in re.findall(r'<select name="([^"]+)"[^>]*>(.*?)</select>', html, re.S):
        selected = re.search(r'<option value="([^"]*)" selected>', body)
        values[name] = selected.group(1) if selected else ""
    for name, body in re.findall(r'<textarea name="([^"]+)"[^>]*>(.*?)</textarea>', html, re.S):
        values[name] = body.strip("\n")
    return values


def test_the_form_comes_filled_with_every_value_of_the_experiment(owner_client, make_experiment):
    experiment = make_experiment(name="Tuned", total_steps=1234, eval_interval=300, eval_episodes=3,
                                 checkpoint_interval=600, video_interval=900, num_seeds=2, device="auto",
                                 keep_checkpoints=7, tags=["baseline", "lr sweep"], description="Smaller net.",
                                 hyperparameters={**trainer.validate("dqn", "CartPole-v1", {}),
                                                  "learning_rate": 0.00042, "double_q": True, "hidden_layers": "16"})
    response = owner_client.get(clone_url(experiment))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'action="/experiments/new/"' in html and "Clone of Tuned" in html
    values = posted_values(html)
    assert values["name"] == "Tuned (copy)"
    assert {name: values[name] for name in ("algorithm", "env_id", "total_steps", "eval_interval", "eval_episodes",
                                            "checkpoint_interval", "keep_checkpoints", "video_interval", "num_seeds",
                                            "device", "tags")} == {
        "algorithm": "dqn", "env_id": "CartPole-v1", "total_steps": "1234", "eval_interval": "300",
        "eval_episodes": "3", "checkpoint_interval": "600", "keep_checkpoints": "7", "video_interval": "900",
        "num_seeds": "2", "device": "auto", "tags": "baseline, lr sweep"}
    assert values["description"] == "Smaller net."
    assert values["hp_learning_rate"] == "0.00042" and values["hp_hidden_layers"] == "16"
    assert values["hp_double_q"] == "on"
    assert 'value="0.00042"' in field_block(html, "hp_learning_rate")


def test_launching_the_filled_form_unchanged_makes_an_equal_new_experiment(owner_client, make_experiment,
                                                                           django_capture_on_commit_callbacks):
    original = make_experiment(name="Tuned", tags=["baseline"], description="Why not.", video_interval=100,
                               hyperparameters=trainer.validate("dqn", "CartPole-v1", {"learning_rate": "0.003",
                                                                                       "hidden_layers": "8,8"}))
    values = posted_values(owner_client.get(clone_url(original)).content.decode())
    values["hp_gamma"] = "0.95"  # the one change
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(reverse("experiment-new"), values)
    copy = Experiment.objects.exclude(pk=original.pk).get()
    assert response.status_code == 302 and response["Location"] == copy.get_absolute_url()
    assert copy.name == "Tuned (copy)" and copy.runs.count() == original.num_seeds
    assert copy.hyperparameters == {**original.hyperparameters, "gamma": 0.95}
    for name in ("algorithm", "env_id", "total_steps", "eval_interval", "eval_episodes", "checkpoint_interval",
                 "video_interval", "num_seeds", "device", "tags", "description"):
        assert getattr(copy, name) == getattr(original, name), name
    original.refresh_from_db()
    assert original.name == "Tuned" and original.hyperparameters["gamma"] != 0.95


def test_another_algorithm_is_cloned_with_its_own_fields(owner_client, make_experiment):
    experiment = make_experiment(algorithm="sac", env_id="Pendulum-v1",
                                 hyperparameters=trainer.validate("sac", "Pendulum-v1", {"tau": "0.01"}))
    response = owner_client.get(clone_url(experiment))
    assert response.context["form"].algorithm_name == "sac"
    assert posted_values(response.content.decode())["hp_tau"] == "0.01"


def test_a_stranger_gets_a_404(stranger_client, make_experiment):
    assert stranger_client.get(clone_url(make_experiment())).status_code == 404


def test_a_missing_experiment_is_a_404(owner_client, db):
    assert owner_client.get(reverse("experiment-clone", args=[4242])).status_code == 404
