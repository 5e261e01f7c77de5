"""Normalised scores and published baselines come from the data files, and every data file names its source."""

import json

import pytest

from rlweb.scores import baselines, normalise
from rlweb.scores.normalise import DATA


def test_every_data_file_names_its_source_and_licence():
    files = sorted(DATA.rglob("*.json"))
    assert len(files) >= 4
    for path in files:
        data = json.loads(path.read_text())
        assert data.get("source", "").strip(), f"{path.name} names no source"
        assert data.get("licence", "").strip(), f"{path.name} names no licence"


def test_atari_scores_are_human_normalised_from_the_table():
    games = json.loads((DATA / "atari_human_random.json").read_text())["games"]
    assert len(games) == 57
    pong = games["pong"]
    assert normalise.normalise("ALE/Pong-v5", pong["random"]) == 0
    assert normalise.normalise("PongNoFrameskip-v4", pong["human"]) == pytest.approx(1)
    assert normalise.normalise("ALE/UpNDown-v5", 533.4) == 0
    assert normalise.reference("ALE/MontezumaRevenge-v5")["high"] == games["montezuma_revenge"]["human"]


def test_other_tasks_are_min_max_from_random_and_the_gymnasium_threshold():
    random_mean = json.loads((DATA / "random_scores.json").read_text())["scores"]["CartPole-v1"]["mean"]
    threshold = json.loads((DATA / "gymnasium_reward_thresholds.json").read_text())["thresholds"]["CartPole-v1"]
    assert threshold == 475
    assert normalise.normalise("CartPole-v1", random_mean) == 0
    assert normalise.normalise("CartPole-v1", 475) == pytest.approx(1)
    assert normalise.reference("CartPole-v1")["kind"] == "min-max"


def test_a_task_without_a_threshold_takes_the_best_rl_zoo_score():
    reference = normalise.reference("Pendulum-v1")
    best = max(row["mean"] for row in json.loads((DATA / "rl_zoo_benchmark.json").read_text())["results"]
               if row["env_id"] == "Pendulum-v1")
    assert reference["high"] == best == -151.34
    assert "RL Zoo" in reference["high_label"]


def test_a_task_without_references_has_no_normalised_score():
    assert normalise.reference("HumanoidStandup-v5") is None
    assert normalise.normalise("NoSuchTask-v0", 10) is None


def test_a_run_stands_beside_rl_zoos_final_score():
    stand = baselines.standing("LunarLander-v3", "ppo", 247.0)
    assert stand["text"] == "final 247; RL Zoo PPO: 242 ± 32"
    assert stand["published_env_id"] == "LunarLander-v2"
    assert baselines.standing("ALE/Pong-v5", "dqn", None)["text"] == "RL Zoo DQN: 20.6 ± 0.6"
    assert baselines.standing("CartPole-v1", "no-such-algorithm", 1.0) is None
    assert {row["algorithm"] for row in baselines.final_scores("ALE/Breakout-v5")} == {"a2c", "dqn", "ppo", "qrdqn"}


def test_dopamines_pong_curve_comes_in_agent_steps_four_frames_each():
    [curve] = baselines.curves("ALE/Pong-v5", "dqn")
    assert curve["published_env_id"] == "ALE/Pong-v5" and curve["label"] == "Dopamine dqn"
    assert curve["steps"][:3] == [0, 2_500_000, 5_000_000]  # iterations 0, 10, 20 of 1,000,000 frames each
    assert curve["steps"][-1] == 198 * 250_000
    assert curve["low"][-1] <= curve["mean"][-1] <= curve["high"][-1]
    assert curve["mean"][0] == pytest.approx(-20.35, abs=0.01) and "frames" in curve["x_note"]
    assert baselines.curves("PongNoFrameskip-v4", "ppo") == [] and baselines.curves("CartPole-v1") == []


DOPAMINE_GAMES = {"pong": "ALE/Pong-v5", "breakout": "ALE/Breakout-v5", "battlezone": "ALE/BattleZone-v5",
                  "qbert": "ALE/Qbert-v5", "doubledunk": "ALE/DoubleDunk-v5",
                  "namethisgame": "ALE/NameThisGame-v5", "phoenix": "ALE/Phoenix-v5"}


@pytest.mark.parametrize("game", sorted(DOPAMINE_GAMES))
def test_dopamines_curve_files_load_name_their_source_and_hold_what_their_runs_reduce_to(game):
    from rlweb.scores import dopamine_curves

    data = json.loads((DATA / "curves" / f"dopamine_{game}.json").read_text())
    assert f"baselines/atari/data/{game}.json" in data["source"] and dopamine_curves.COMMIT in data["source"]
    assert data["licence"].startswith("Apache-2.0") and data["frames_per_x"] == 1_000_000
    [(env_id, by_algorithm)] = data["curves"].items()
    assert env_id == DOPAMINE_GAMES[game] and "dqn" in by_algorithm
    for name, curve in by_algorithm.items():
        assert len(curve["seeds"]) >= 3 and curve["x"][:3] == [0, 10, 20] and curve["x"][-1] == 198
        # the mean and band are what the script makes of the runs' published values (Dopamine's record form)
        records = [{"Iteration": x, "Value": value, "Agent": name.upper() if name != "rainbow" else "Rainbow"}
                   for seed in curve["seeds"] for x, value in zip(curve["x"], seed)]
        assert dopamine_curves.reduce(records, records[0]["Agent"]) == curve
        [found] = baselines.curves(env_id.replace("ALE/", "").replace("-v5", "NoFrameskip-v4"), name)
        assert found["label"] == f"Dopamine {name}" and found["steps"][-1] == 198 * 250_000


def test_a_rainbow_run_gets_dopamines_rainbow_curve_and_a_dqn_run_only_dqns():
    [rainbow] = baselines.curves("PongNoFrameskip-v4", "rainbow")
    assert rainbow["label"] == "Dopamine rainbow" and rainbow["published_env_id"] == "ALE/Pong-v5"
    assert rainbow["mean"][0] == pytest.approx(-20.42, abs=0.01) and rainbow["mean"][-1] == pytest.approx(20.18, abs=0.01)
    assert [curve["algorithm"] for curve in baselines.curves("ALE/Pong-v5")] == ["dqn", "rainbow"]
    assert [curve["algorithm"] for curve in baselines.curves("ALE/Pong-v5", "DQN")] == ["dqn"]
