"""vectorization=ale: Atari training envs stepped by ale-py's AtariVectorEnv (trainer.envs.AtariVector), with the
semantics of our Gymnasium wrappers (make_env(training=True)): the same spaces, stack order and padding, clipped
rewards and lost lives for the learner, the real scores reported."""

import gymnasium as gym
import numpy as np
import pytest
import trainer
from ale_py.vector_env import AtariVectorEnv
from trainer import agent as agent_module
from trainer.envs import AtariVector, ale_settings, finished_episodes, make_env, make_vector_env
from trainer.params import ConfigError


def test_atari_ids_step_in_ales_vector_env_by_default_and_other_ids_as_before():
    for env_id in ("ALE/Pong-v5", "PongNoFrameskip-v4"):
        envs = make_vector_env(env_id, 2, seed=0, vectorization="auto")
        assert isinstance(envs, AtariVector)
        envs.close()
    envs = make_vector_env("CartPole-v1", 2, seed=0, vectorization="auto")
    assert isinstance(envs, gym.vector.SyncVectorEnv)
    envs.close()
    assert trainer.get_spec("ppo").config_class().vectorization == "auto"


def test_ale_is_refused_for_an_env_that_is_not_atari():
    with pytest.raises(ConfigError) as error:
        trainer.validate("ppo", "CartPole-v1", {"vectorization": "ale"})
    assert "Atari" in error.value.errors["vectorization"]


def test_the_ids_own_emulator_settings_are_kept():
    v5, v4 = ale_settings("ALE/Pong-v5", 2), ale_settings("PongNoFrameskip-v4", 2)
    assert v5["repeat_action_probability"] == 0.25 and v4["repeat_action_probability"] == 0.0  # sticky as v5
    assert v5["noop_max"] == 30 and v5["use_fire_reset"] and v5["frameskip"] == 4 and v5["stack_num"] == 4
    assert not v5["reward_clipping"] and not v5["episodic_life"]  # done by AtariVector, keeping the real score
    assert ale_settings("ALE/Pong-v5", 64)["num_threads"] >= 1


def test_observations_agree_with_the_gymnasium_wrappers_in_space_stack_order_and_padding():
    envs = make_vector_env("ALE/Pong-v5", 2, seed=3, vectorization="ale")
    env = make_env("ALE/Pong-v5", training=True)
    try:
        assert envs.single_observation_space == env.observation_space  # Box(0, 255, (4, 84, 84), uint8)
        assert envs.single_action_space == env.action_space
        observations, _ = envs.reset(seed=3)
        theirs, _ = env.reset(seed=3)
        assert observations.dtype == theirs.dtype == np.uint8 and observations.shape[1:] == theirs.shape
        for stack in (*observations, theirs):  # an episode starts with its first frame repeated
            assert all((stack[k] == stack[-1]).all() for k in range(4))
        # the same screen, preprocessed alike: the mean brightness of the first frame within a few levels
        assert abs(float(observations[:, -1].mean()) - float(theirs[-1].mean())) < 6
        rng = np.random.default_rng(0)
        for _ in range(40):  # oldest frame first: each step shifts the stack by one and appends the newest
            actions = rng.integers(0, 6, 2)
            following, _, terminated, truncated, _ = envs.step(actions)
            their_following, *_ = env.step(int(actions[0]))
            assert not (terminated | truncated).any()
            np.testing.assert_array_equal(following[:, :-1], observations[:, 1:])
            np.testing.assert_array_equal(their_following[:-1], theirs[1:])
            observations, theirs = following, their_following
    finally:
        envs.close()
        env.close()


def test_true_returns_and_lost_lives_are_accounted_exactly_on_a_scripted_game():
    """The same seed and actions through a raw AtariVectorEnv (unclipped, no life losses) give the emulator's
    rewards and lives; AtariVector must turn them into exactly the learner's and the report's view."""
    seed, steps = 11, 700
    ours = make_vector_env("ALE/Breakout-v5", 2, seed=seed, vectorization="ale")
    raw = AtariVectorEnv(**ale_settings("ALE/Breakout-v5", 2))
    try:
        ours.reset(seed=seed)
        _, info = raw.reset(seed=seed)
        lives, score, length = info["lives"].copy(), np.zeros(2), np.zeros(2, dtype=int)
        rng = np.random.default_rng(1)
        reported, expected, life_losses = [], [], 0
        for _ in range(steps):
            actions = rng.integers(0, 4, 2)
            observations, rewards, terminated, truncated, infos = ours.step(actions)
            raw_obs, raw_rewards, raw_terminated, raw_truncated, raw_info = raw.step(actions)
            game_over = raw_terminated | raw_truncated
            lost = ~game_over & (raw_info["lives"] > 0) & (raw_info["lives"] < lives)
            np.testing.assert_array_equal(rewards, np.sign(raw_rewards))  # clipped for learning
            np.testing.assert_array_equal(terminated, raw_terminated | lost)  # a lost life ends it for the learner
            np.testing.assert_array_equal(truncated, raw_truncated)
            np.testing.assert_array_equal(observations[:, -1], raw_obs[:, -1])
            for i in np.flatnonzero(lost):  # the learner's next episode starts from the frame the life ended on
                np.testing.assert_array_equal(infos["final_obs"][i], raw_obs[i])
                assert all((observations[i, k] == raw_obs[i, -1]).all() for k in range(4))
            score += raw_rewards
            length += 1
            for i in np.flatnonzero(game_over):
                expected.append((float(score[i]), int(length[i])))
                score[i], length[i] = 0, 0
            reported += finished_episodes(infos)
            life_losses += int(lost.sum())
            lives = raw_info["lives"].copy()
        assert len(expected) >= 2 and life_losses >= 4 * len(expected)  # whole games of 5 lives, several of them
        assert sorted(reported) == sorted(expected)  # the real, unclipped score of each whole game, once
        assert any(episode_return > 1 for episode_return, _ in reported)  # scores above the clipped reward's 1
    finally:
        ours.close()
        raw.close()


def random_games(vectorization: str, games: int) -> list[tuple[float, int]]:
    """Whole games of Breakout played with uniformly random actions, 4 envs."""
    if vectorization == "wrappers":
        envs = gym.vector.SyncVectorEnv([lambda: make_env("ALE/Breakout-v5", training=True)] * 4,
                                        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    else:
        envs = make_vector_env("ALE/Breakout-v5", 4, seed=0, vectorization="ale")
    envs.reset(seed=0)
    rng, finished = np.random.default_rng(0), []
    try:
        while len(finished) < games:
            *_, infos = envs.step(rng.integers(0, 4, 4))
            finished += finished_episodes(infos)
    finally:
        envs.close()
    return finished


def test_random_play_scores_as_through_the_gymnasium_wrappers():
    """The emulators' random streams differ, so the agreement is statistical: 8 random games of Breakout each
    (mean score about 1.3, standard deviation about 1.2; whole games of 5 lives, about 180 steps)."""
    ale, wrappers = random_games("ale", 8), random_games("wrappers", 8)
    assert abs(np.mean([r for r, _ in ale]) - np.mean([r for r, _ in wrappers])) < 1.5
    ale_length, wrappers_length = np.mean([n for _, n in ale]), np.mean([n for _, n in wrappers])
    assert 0.7 < ale_length / wrappers_length < 1.3


@pytest.mark.parametrize("algorithm, settings", [
    ("ppo", dict(num_envs=2, n_steps=8, batch_size=8, n_epochs=1)),
    ("a2c", dict(num_envs=2, n_steps=4)),
    ("vpg", dict(num_envs=2)),
    ("rnd-ppo", dict(num_envs=2, n_steps=8, batch_size=8, n_epochs=1)),
    ("dqn", dict(num_envs=2, learning_starts=8, batch_size=4, buffer_size=64, train_frequency=4)),
])
def test_every_algorithm_with_several_envs_steps_atari_in_ales_vector_env(algorithm, settings, monkeypatch):
    made = []

    def recorded(*args, **kwargs):
        made.append(make_vector_env(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(agent_module, "make_vector_env", recorded)
    agent = trainer.make(algorithm, "ALE/Pong-v5", seed=0, device="cpu", preset="auto", **settings)
    agent.learn(32, eval_episodes=0)
    assert agent.steps_done >= 32 and [type(envs) for envs in made] == [AtariVector]
