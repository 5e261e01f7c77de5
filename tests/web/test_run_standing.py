"""A run's page says where it stands beside the published score for its task and algorithm, and its normalised
score, and hands the published band to its return charts."""

import json
import re

import pytest

from rlweb.experiments.models import Run
from rlweb.scores import baselines


def page_of(client, run) -> str:
    response = client.get(run.get_absolute_url())
    assert response.status_code == 200
    return response.content.decode()


def test_a_finished_run_stands_beside_rl_zoos_score(owner_client, make_experiment):
    experiment = make_experiment(algorithm="ppo", env_id="LunarLander-v3", hyperparameters={})
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=1000, status="succeeded",
                             eval_return_mean=247.0, eval_return_std=12.0, best_eval_return=250.0)
    page = page_of(owner_client, run)
    assert "final 247; RL Zoo PPO: 242 ± 32" in page
    assert "published on LunarLander-v2 after 1,000,000 agent steps" in page
    assert "min-max score 1.12 (0: random policy on LunarLander-v3, 1: solved threshold of LunarLander-v3)" in page
    bands = json.loads(re.search(r'<script id="run-baselines" type="application/json">(.*?)</script>', page).group(1))
    assert [(band["label"], band["mean"], band["std"]) for band in bands] == [("RL Zoo PPO", 242.119, 31.823)]


def test_a_running_run_says_last_eval_and_an_unknown_pairing_says_nothing(owner_client, make_experiment):
    running = Run.objects.create(experiment=make_experiment(algorithm="dqn", env_id="CartPole-v1"), seed=0,
                                 total_steps=1000, status="running", eval_return_mean=180.0)
    assert "last eval 180; RL Zoo DQN: 500 ± 0" in page_of(owner_client, running)
    unknown = Run.objects.create(experiment=make_experiment(algorithm="reinforce", env_id="HumanoidStandup-v5"),
                                 seed=0, total_steps=1000, status="succeeded", eval_return_mean=1.0)
    page = page_of(owner_client, unknown)
    assert 'id="run-standing"' not in page and '<script id="run-baselines" type="application/json">[]</script>' in page


def test_a_pong_dqn_run_gets_dopamines_curve_cut_to_its_budget(owner_client, make_experiment):
    experiment = make_experiment(algorithm="dqn", env_id="ALE/Pong-v5", total_steps=4_000_000)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=4_000_000, status="running")
    page = page_of(owner_client, run)
    curves = json.loads(re.search(r'<script id="run-baseline-curves" type="application/json">(.*?)</script>',
                                  page).group(1))
    assert [curve["label"] for curve in curves] == ["Dopamine dqn"]
    assert curves[0]["steps"] == [0, 2_500_000, 4_000_000]  # cut at the budget, the last point interpolated there
    full = baselines.curves("ALE/Pong-v5", "dqn")[0]
    assert curves[0]["mean"][:2] == full["mean"][:2]
    assert curves[0]["mean"][2] == pytest.approx(full["mean"][1] + (full["mean"][2] - full["mean"][1]) * 0.6)
    assert "RL Zoo DQN: 20.6 ± 0.6" in page  # and PongNoFrameskip-v4's final score


def test_a_breakout_dqn_run_gets_dopamines_breakout_curve_not_pongs(owner_client, make_experiment):
    experiment = make_experiment(algorithm="dqn", env_id="ALE/Breakout-v5", total_steps=10_000_000)
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=10_000_000, status="running")
    curves = json.loads(re.search(r'<script id="run-baseline-curves" type="application/json">(.*?)</script>',
                                  page_of(owner_client, run)).group(1))
    assert [(curve["label"], curve["published_env_id"]) for curve in curves] == [("Dopamine dqn", "ALE/Breakout-v5")]
    assert curves[0]["steps"] == [0, 2_500_000, 5_000_000, 7_500_000, 10_000_000]
    assert curves[0]["mean"][0] == pytest.approx(1.64, abs=0.01)  # Dopamine's 5 runs at iteration 0
    assert "baselines/atari/data/breakout.json" in curves[0]["source"]
