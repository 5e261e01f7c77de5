"""The new-experiment form starts from the preset the algorithm has for the environment (RL Zoo's tuned
settings, or the environment family's), keeps what the user typed, can go back to the plain defaults, and
the experiment records the preset it started from."""

import re
import sys

import pytest
from django.urls import reverse

from rlweb.experiments import compare
from rlweb.experiments.models import Experiment, Run
from tests.web.helpers import form_data


def value_of(html: str, name: str) -> str:
    match = re.search(rf'<input[^>]*name="{name}"[^>]*>', html)
    assert match, f"no input {name}"
    value = re.search(r'value="([^"]*)"', match.group(0))
    return value.group(1) if value else ""


def page(client, **query) -> str:
    response = client.get(reverse("experiment-new"), query)
    assert response.status_code == 200
    return response.content.decode()


def test_the_fields_start_from_the_settings_tuned_for_the_environment(owner_client):
    html = page(owner_client, algorithm="dqn", env_id="Acrobot-v1")
    assert value_of(html, "hp_learning_rate") == "0.00063" and value_of(html, "hp_target_update_interval") == "250"
    assert value_of(html, "preset") == "zoo:Acrobot-v1" and value_of(html, "total_steps") == "100000"
    assert "Filled in from <strong>RL Zoo: tuned for Acrobot-v1</strong>" in html
    assert "RL Zoo 2.9.2, hyperparams/dqn.yml: Acrobot-v1" in html
    assert 'data-preset="none"' in html


def test_an_atari_game_gets_the_atari_settings_and_what_has_no_equivalent(owner_client):
    html = page(owner_client, algorithm="dqn", env_id="ALE/Pong-v5")
    assert value_of(html, "hp_learning_rate") == "0.0001" and value_of(html, "hp_hidden_layers") == "none"
    assert "RL Zoo: its Atari settings" in html and "Atari envs always stack 4 frames" in html


def test_the_plain_defaults_are_one_click_away_and_say_which_preset_they_leave(owner_client):
    html = page(owner_client, algorithm="dqn", env_id="Acrobot-v1", preset="none")
    assert value_of(html, "hp_learning_rate") == "0.0023" and value_of(html, "preset") == "none"
    assert 'data-preset="auto">Use RL Zoo: tuned for Acrobot-v1</button>' in html


def test_values_the_user_changed_are_kept_over_the_preset(owner_client):
    html = page(owner_client, algorithm="dqn", env_id="Acrobot-v1", hp_learning_rate="0.01", total_steps="5000")
    assert value_of(html, "hp_learning_rate") == "0.01" and value_of(html, "total_steps") == "5000"
    assert value_of(html, "hp_target_update_interval") == "250"


def test_an_environment_nobody_tuned_for_gets_the_defaults_without_a_preset(owner_client):
    html = page(owner_client, algorithm="dqn", env_id="FrozenLake-v1")
    assert value_of(html, "preset") == "none" and "dqn's own defaults" in html and "data-preset" not in html


def test_the_experiment_records_the_preset_and_the_compare_diff_shows_it(owner_client, live_redis, make_experiment,
                                                                         django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(reverse("experiment-new"), form_data(preset="zoo:CartPole-v1"))
    experiment = Experiment.objects.get()
    assert response.status_code == 302 and experiment.preset == "zoo:CartPole-v1"
    assert "preset <code>zoo:CartPole-v1</code>" in owner_client.get(experiment.get_absolute_url()).content.decode()
    plain_experiment = make_experiment(hyperparameters=experiment.hyperparameters)
    plain = Run.objects.create(experiment=plain_experiment, seed=0, total_steps=plain_experiment.total_steps)
    rows = {row["name"]: row for row in compare.hyperparameter_rows([experiment.runs.get(), plain])}
    assert rows["preset"]["values"] == ["zoo:CartPole-v1", "none"] and rows["preset"]["differs"]


def test_a_clone_keeps_the_experiments_preset_and_values(owner_client, make_experiment):
    experiment = make_experiment(preset="zoo:CartPole-v1", hyperparameters={"learning_rate": 0.005})
    html = owner_client.get(reverse("experiment-clone", args=[experiment.pk])).content.decode()
    assert value_of(html, "preset") == "zoo:CartPole-v1" and value_of(html, "hp_learning_rate") == "0.005"


def test_a_preset_the_algorithm_does_not_have_is_refused_and_nothing_is_queued(owner_client, live_redis):
    response = owner_client.post(reverse("experiment-new"), form_data(preset="zoo:Nowhere-v0"))
    assert response.status_code == 200 and not Experiment.objects.exists()
    assert "dqn has no preset" in response.content.decode()
    assert live_redis.llen("cpu") == 0


def test_the_preset_endpoint_gives_the_values_the_fields_start_from(owner_client):
    answer = owner_client.get(reverse("experiment-preset"), {"algorithm": "dqn", "env_id": "Acrobot-v1"}).json()
    assert answer["preset"]["name"] == "zoo:Acrobot-v1" and answer["preset"]["total_steps"] == 100_000
    assert answer["values"]["learning_rate"] == "0.00063" and answer["values"]["double_q"] is False
    plain = owner_client.get(reverse("experiment-preset"),
                             {"algorithm": "dqn", "env_id": "Acrobot-v1", "preset": "none"}).json()
    assert plain["preset"] is None and plain["available"]["name"] == "zoo:Acrobot-v1"
    assert plain["values"]["learning_rate"] == "0.0023"


@pytest.mark.parametrize("query", [
    {"algorithm": "nope", "env_id": "CartPole-v1"},
    {"algorithm": "dqn", "env_id": "CartPole-v1", "preset": "zoo:Nowhere-v0"},
    {"algorithm": "dqn", "env_id": "x" * 201},
    {"algorithm": "dqn", "env_id": "CartPole-v1", "preset": "p" * 101},
    {},
])
def test_the_preset_endpoint_answers_bad_queries_with_a_400(owner_client, query):
    response = owner_client.get(reverse("experiment-preset"), query)
    assert response.status_code == 400 and response.json()["error"]


def test_the_preset_endpoint_imports_no_module_named_in_an_environment_id(owner_client):
    answer = owner_client.get(reverse("experiment-preset"),
                              {"algorithm": "dqn", "env_id": "tests.web.never_imported:CartPole-v1"}).json()
    assert answer["preset"] is None and "tests.web.never_imported" not in sys.modules


def test_launching_says_what_the_runs_will_do_that_the_values_alone_do_not(owner_client, live_redis,
                                                                           django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(reverse("experiment-new"), form_data(hp_learning_starts="0", hp_batch_size="16"),
                                     follow=True)
    assert "learning_starts=0 is below batch_size=16: learning starts once the replay holds 16 transitions." in \
        response.content.decode()
