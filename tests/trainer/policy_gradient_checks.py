"""Checks every policy-gradient algorithm passes; each algorithm's test module calls them with its own
tiny settings."""

import numpy as np

import trainer
from trainer.events import ListSink

from tests.trainer import envs_for_policy_tests, envs_for_tests  # noqa: F401  (register the test envs)

# one env per observation space (Discrete actions), then one per action space (Box observations)
OBSERVATION_ENVS = ["rlweb-test/Corridor-box-v0", "rlweb-test/Corridor-discrete-v0",
                    "rlweb-test/Corridor-multidiscrete-v0", "rlweb-test/Corridor-multibinary-v0",
                    "rlweb-test/ImageCorridor-v0"]
ACTION_ENVS = ["rlweb-test/ActionCorridor-box-v0", "rlweb-test/ActionCorridor-multidiscrete-v0",
               "rlweb-test/ActionCorridor-multibinary-v0"]


def trains_saves_loads_and_evaluates(algorithm: str, env_id: str, settings: dict, tmp_path, steps: int = 300):
    agent = trainer.make(algorithm, env_id, seed=1, **settings)
    sink = ListSink()
    summary = agent.learn(steps, sink=sink, checkpoint_dir=tmp_path, eval_episodes=2)
    assert summary["status"] == "succeeded" and summary["steps"] >= steps
    assert sink.of_kind("train"), "no update happened"
    train = {key for event in sink.of_kind("train") for key in event["values"]}
    assert {"train/loss", "train/entropy", "train/learning_rate"} <= train
    loaded = trainer.load(tmp_path / "final.zip")
    observations = np.stack([agent.observation_space.sample() for _ in range(20)])
    np.testing.assert_array_equal(agent.act(observations, True), loaded.act(observations, True))
    assert loaded.steps_done == summary["steps"]
    result = loaded.evaluate(2)
    assert np.isfinite(result["mean"])
    actions = loaded.act(observations, False)
    assert all(agent.action_space.contains(action) for action in actions)


def same_seed_gives_identical_metrics(algorithm: str, env_id: str, settings: dict, steps: int = 400):
    def metrics():
        sink = ListSink()
        trainer.make(algorithm, env_id, seed=3, **settings).learn(steps, sink=sink, eval_episodes=2)
        return [(e["kind"], e["step"], e["values"]) for e in sink.events if e["kind"] not in ("time", "finished")]

    first, second = metrics(), metrics()
    assert first == second
    assert any(kind == "train" for kind, _, _ in first)
