"""The compare page's statistics: scores normalised per task, rliable's aggregates per group computed off the
request and cached per selection (a new event makes a new key), the evaluation that counts chosen by the query."""

import json
import time

import numpy as np
import pytest
from django.urls import reverse

from rlweb.experiments import compare_stats
from rlweb.experiments.models import Run
from rlweb.experiments.redis_keys import redis_client
from rlweb.scores import aggregates, normalise
from tests.web.api_helpers import owner_api, stranger_api  # noqa: F401  (fixtures)
from tests.web.test_compare import add_events

STATS, PAGE = reverse("compare-statistics"), reverse("compare")
FINALS = {("dqn", "CartPole-v1"): [120.0, 200.0, 160.0], ("dqn", "Acrobot-v1"): [-300.0, -250.0, -200.0],
          ("ppo", "CartPole-v1"): [450.0, 500.0, 480.0], ("ppo", "Acrobot-v1"): [-100.0, -90.0, -120.0]}


@pytest.fixture
def suite(make_experiment):
    """2 algorithms x 2 tasks x 3 seeds, each run with three evaluations ending at its final score."""
    runs = []
    for (algorithm, env_id), finals in FINALS.items():
        experiment = make_experiment(name=f"{algorithm} {env_id}", algorithm=algorithm, env_id=env_id, tags=["suite"])
        for seed, final in enumerate(finals):
            run = Run.objects.create(experiment=experiment, seed=seed, total_steps=300)
            add_events(run, "eval", [(step, {"eval/return_mean": final * fraction})
                                     for step, fraction in ((100, 0.2), (200, 1.5), (300, 1.0))])
            runs.append(run)
    return runs


def query(runs, **options):
    return {"runs": ",".join(str(run.pk) for run in runs), **options}


def finished(client, params, seconds=60):
    """The statistics once computed: the endpoint is asked again, as the page does, until they are there."""
    deadline = time.monotonic() + seconds
    while True:
        response = client.get(STATS, params)
        assert response.status_code in (200, 202), response.content
        if response.status_code == 200:
            return response.json()
        assert time.monotonic() < deadline, "the statistics were not computed in time"
        time.sleep(0.05)


def expected_matrix(algorithm, pick=lambda finals: finals):
    tasks = ["Acrobot-v1", "CartPole-v1"]
    columns = [[normalise.normalise(task, score) for score in pick(FINALS[algorithm, task])] for task in tasks]
    return np.array(columns).T


def test_aggregates_per_algorithm_are_rliables_on_the_normalised_final_scores(owner_client, suite):
    first = owner_client.get(STATS, query(suite))
    assert first.status_code == 202 and first.json()["state"] == "pending"
    result = finished(owner_client, query(suite))
    assert result["state"] == "done" and result["normalised"] and result["groups"] == ["dqn", "ppo"]
    expected = aggregates.aggregate_scores({"dqn": expected_matrix("dqn"), "ppo": expected_matrix("ppo")},
                                           reps=compare_stats.REPS)
    for group in ("dqn", "ppo"):
        for metric in aggregates.METRICS:
            assert result["aggregates"][group][metric] == pytest.approx(list(expected[group][metric]))
    improvement = result["improvement"]
    assert (improvement["x"], improvement["y"]) == ("dqn", "ppo") and improvement["value"][0] == 0.0
    assert len(result["profiles"]["ppo"]["point"]) == compare_stats.PROFILE_POINTS
    assert result["efficiency"]["steps"][0] == 100 and result["efficiency"]["steps"][-1] == 300
    assert len(result["efficiency"]["groups"]["dqn"]["point"]) == compare_stats.CURVE_POINTS


def test_a_computed_selection_comes_from_the_cache_until_a_run_reports_again(owner_client, suite):
    finished(owner_client, query(suite))
    cached = owner_client.get(STATS, query(suite))
    assert cached.status_code == 200 and cached.json()["cached"] is True  # read from Redis, nothing computed
    add_events(suite[0], "eval", [(400, {"eval/return_mean": 10.0})])
    assert owner_client.get(STATS, query(suite)).status_code == 202


def test_the_evaluation_that_counts_is_chosen_best_or_mean_of_the_last_n(owner_client, suite):
    best = finished(owner_client, query(suite, count="best"))
    expected = aggregates.aggregate_scores({"ppo": expected_matrix("ppo", lambda finals: [1.5 * f if f > 0 else 0.2 * f
                                                                                           for f in finals])}, reps=compare_stats.REPS)
    assert best["aggregates"]["ppo"]["mean"][0] == pytest.approx(expected["ppo"]["mean"][0])
    last_two = finished(owner_client, query(suite, count="last", last="2"))
    expected = aggregates.aggregate_scores({"ppo": expected_matrix("ppo", lambda finals: [1.25 * f for f in finals])},
                                           reps=compare_stats.REPS)
    assert last_two["aggregates"]["ppo"]["iqm"][0] == pytest.approx(expected["ppo"]["iqm"][0])


def test_groups_by_tag_and_probability_of_improvement_between_chosen_groups(owner_client, suite):
    by_tag = finished(owner_client, query(suite, by="tag"))
    assert by_tag["groups"] == ["tag:suite"] and by_tag["runs"] == {"tag:suite": 6} and by_tag["improvement"] is None
    swapped = finished(owner_client, query(suite, improve="ppo", over="dqn"))
    assert (swapped["improvement"]["x"], swapped["improvement"]["y"]) == ("ppo", "dqn")
    assert swapped["improvement"]["value"][0] == 1.0


def test_the_background_task_stores_what_the_page_reads(owner_client, suite):
    from rlweb.experiments.tasks import compare_statistics

    runs = suite[:3]
    inputs = compare_stats.collect(runs, compare_stats.StatsOptions())
    key = compare_stats.cache_key(inputs)
    redis_client().set(f"{key}:input", json.dumps(inputs))
    assert compare_statistics(key) == "done"
    response = owner_client.get(STATS, query(runs))
    assert response.status_code == 200 and response.json()["groups"] == ["dqn"]


@pytest.mark.parametrize("params, field", [({"by": "colour"}, "by"), ({"count": "worst"}, "count"),
                                           ({"last": "0"}, "last"), ({"last": "x"}, "last"),
                                           ({"metric": "train/loss"}, "metric")])
def test_it_refuses_bad_options_by_field(owner_client, suite, params, field):
    response = owner_client.get(STATS, query(suite, **params))
    assert response.status_code == 400 and response.json()["error"].startswith(field)


def test_a_stranger_gets_no_statistics_of_the_owners_runs(stranger_client, suite):
    response = stranger_client.get(STATS, query(suite))
    assert response.status_code == 200 and response.json()["groups"] == [] and "tiny" not in response.content.decode()


def test_the_compare_page_offers_the_statistics_and_the_published_baseline(owner_client, suite):
    page = owner_client.get(PAGE, {"runs": ",".join(str(run.pk) for run in suite[:3])}).content.decode()
    assert 'id="statistics"' in page and STATS in page
    assert "RL Zoo DQN" in page and "500 ± 0" in page


def test_the_table_is_stored_before_the_curves_are_computed(suite):
    stages = list(compare_stats.compute_in_stages(compare_stats.collect(suite, compare_stats.StatsOptions())))
    assert [stage["state"] for stage in stages] == ["partial", "done"]
    assert stages[0]["aggregates"] == stages[1]["aggregates"] and stages[0]["improvement"] == stages[1]["improvement"]
    assert stages[0]["efficiency"] is None and stages[1]["efficiency"] is not None


def test_the_api_answers_the_same_statistics_and_refuses_bad_options(owner_api, stranger_api, suite):
    params = query(suite)
    deadline = time.monotonic() + 60
    while (response := owner_api.get("/api/statistics", params)).status_code == 202:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert response.status_code == 200 and response.json()["groups"] == ["dqn", "ppo"]
    expected = aggregates.aggregate_scores({"ppo": expected_matrix("ppo")}, reps=compare_stats.REPS)["ppo"]["iqm"]
    assert response.json()["aggregates"]["ppo"]["iqm"] == pytest.approx(list(expected))
    refused = owner_api.get("/api/statistics", query(suite, count="worst"))
    assert refused.status_code == 400 and refused.json()["detail"].startswith("count")
    assert stranger_api.get("/api/statistics", params).json()["groups"] == []


def test_the_compare_data_of_pong_dqn_runs_carries_dopamines_curve_cut_at_their_budget(owner_client, make_experiment):
    experiment = make_experiment(algorithm="dqn", env_id="ALE/Pong-v5", total_steps=3_000_000)
    runs = [Run.objects.create(experiment=experiment, seed=seed, total_steps=3_000_000) for seed in (0, 1)]
    data = owner_client.get(reverse("compare-data"), {"runs": ",".join(str(run.pk) for run in runs)}).json()
    [curve] = data["baseline_curves"]
    assert curve["label"] == "Dopamine dqn" and curve["steps"] == [0, 2_500_000, 3_000_000]
    assert [band["label"] for band in data["baselines"]] == ["RL Zoo DQN"]


def test_runs_logged_from_scripts_are_scored_by_their_training_episodes_return_by_default(owner, owner_client):
    """A CleanRL-style script logs `charts/episodic_return` and no evaluation: its runs get statistics without asking,
    the score being the training episodes' return, as the page's choice says."""
    from tests.web.test_logged_runs import Api, point

    api, finals = Api(owner), {"ppo-script": [400.0, 450.0], "dqn-script": [150.0, 200.0]}
    runs = []
    for name, returns in finals.items():
        for seed, final in enumerate(returns):
            run_id = api.create(experiment=name, config={"env_id": "CartPole-v1", "seed": seed})
            api.points(run_id, [point(1, **{"charts/episodic_return": 20.0, "losses/value_loss": 0.5}),
                                point(2, **{"charts/episodic_return": final})])
            runs.append(Run.objects.get(pk=run_id))
    page = owner_client.get(PAGE, {"runs": ",".join(str(run.pk) for run in runs)}).content.decode()
    assert '<option value="rollout/episode_return" selected>training episode return</option>' in page
    result = finished(owner_client, query(runs, by="experiment"))
    assert result["options"]["metric"] == compare_stats.EPISODE_RETURN and result["normalised"]
    expected = aggregates.aggregate_scores(
        {name: np.array([[normalise.normalise("CartPole-v1", final)] for final in returns])
         for name, returns in finals.items()}, reps=compare_stats.REPS)
    assert [group.split(" #")[0] for group in result["groups"]] == list(finals)  # "name #id"
    for group in result["groups"]:
        assert result["aggregates"][group]["mean"] == pytest.approx(list(expected[group.split(" #")[0]]["mean"]))
    asked = finished(owner_client, query(runs, metric="eval/return_mean"))  # asked for: none has one, said so
    assert asked["groups"] == [] and asked["notes"] == [
        f"Runs with no evaluation return yet: {', '.join(f'#{run.pk}' for run in runs)}."]


def test_runs_trained_here_keep_the_evaluation_return_by_default_beside_logged_ones(owner, owner_client, suite):
    from tests.web.test_logged_runs import Api

    logged = Run.objects.get(pk=Api(owner).create(experiment="script", config={"env_id": "CartPole-v1"}))
    assert compare_stats.default_metric(suite + [logged]) == compare_stats.EVAL_RETURN
    assert compare_stats.default_metric([logged]) == compare_stats.EPISODE_RETURN
    page = owner_client.get(PAGE, {"runs": ",".join(str(run.pk) for run in suite)}).content.decode()
    assert '<option value="eval/return_mean" selected>evaluation return</option>' in page


def test_logged_runs_group_by_the_algorithm_their_scripts_name(owner, owner_client):
    """SB3's callback records the model's class as `algorithm`, CleanRL's scripts their `exp_name`: runs of two
    scripts group apart by algorithm instead of all under "logged", and the compare page labels them so."""
    from tests.web.test_logged_runs import Api, point

    api, runs = Api(owner), []
    for experiment, config in (("sb3-ppo", {"algorithm": "PPO"}), ("sb3-dqn", {"algorithm": "DQN"}),
                               ("cleanrl", {"exp_name": "ppo_continuous_action"}), ("bare", {})):
        run_id = api.create(experiment=experiment, config={"env_id": "CartPole-v1", **config})
        api.points(run_id, [point(1, **{"charts/episodic_return": 100.0})])
        runs.append(Run.objects.get(pk=run_id))
    result = finished(owner_client, query(runs))
    assert result["groups"] == ["PPO", "DQN", "ppo_continuous_action", "logged"]
    data = owner_client.get(reverse("compare-data"), {"runs": ",".join(str(run.pk) for run in runs)}).json()
    assert [run["algorithm"] for run in data["runs"]] == result["groups"]


def test_runs_whose_logs_hold_only_sb3s_mean_of_the_last_episodes_are_scored_by_it_and_told_so(owner, owner_client):
    """SB3's TensorBoard logs, followed or imported, have rollout/ep_rew_mean and no value per episode."""
    from tests.web.test_logged_runs import Api, point

    api, runs = Api(owner), []
    for seed, final in enumerate((180.0, 220.0)):
        run_id = api.create(experiment="sb3 through tensorboard", config={"env_id": "CartPole-v1", "seed": seed})
        api.points(run_id, [point(1, **{"rollout/ep_rew_mean": 20.0}), point(2, **{"rollout/ep_rew_mean": final})])
        runs.append(Run.objects.get(pk=run_id))
    result = finished(owner_client, query(runs))
    assert result["groups"] == ["logged"] and result["runs"] == {"logged": 2}
    expected = aggregates.aggregate_scores({"logged": np.array([[normalise.normalise("CartPole-v1", 180.0)],
                                                                [normalise.normalise("CartPole-v1", 220.0)]])},
                                           reps=compare_stats.REPS)
    assert result["aggregates"]["logged"]["mean"] == pytest.approx(list(expected["logged"]["mean"]))
    assert result["notes"] == [f"Scored by rollout/ep_rew_mean (the mean return of the last 100 episodes, all their "
                               f"logs have): #{runs[0].pk}, #{runs[1].pk}."]
    unnamed = Run.objects.get(pk=api.create(experiment="a folder", config={}))
    api.points(unnamed.pk, [point(1, **{"rollout/ep_rew_mean": 5.0})])
    alone = finished(owner_client, query([unnamed]))
    assert alone["notes"][0] == "No reference scores for runs without an environment id: the scores are raw returns, " \
                                "not normalised."
