"""trainer.envs: making and seeding envs, episode statistics, spaces and their JSON form.

The env-id checks are in test_env_ids.py; the real next observation after an autoreset is also checked on a
real CartPole in test_autoreset.py.
"""

import numpy as np
import pytest
from gymnasium import spaces

from trainer.envs import (env_spaces, finished_episodes, make_env, make_vector_env, real_next_observations,
                          space_from_json, space_to_json)


def play(envs, steps: int, seed: int = 123):
    """Observations and rewards of `steps` vector steps with actions from a fixed generator."""
    rng = np.random.default_rng(seed)
    observations, rewards = [], []
    for _ in range(steps):
        observation, reward, *_ = envs.step(rng.integers(0, 2, envs.num_envs))
        observations.append(observation)
        rewards.append(reward)
    return np.array(observations), np.array(rewards)


def test_a_vector_env_made_twice_with_one_seed_plays_the_same_and_another_seed_differs():
    runs = {}
    for name, seed in (("first", 7), ("again", 7), ("other", 8)):
        envs = make_vector_env("CartPole-v1", 2, seed=seed)
        try:
            runs[name] = (*play(envs, 60), [envs.action_space.sample() for _ in range(5)])
        finally:
            envs.close()
    first, again, other = runs["first"], runs["again"], runs["other"]
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert [list(a) for a in first[2]] == [list(a) for a in again[2]]  # the action space is seeded too
    assert not np.array_equal(first[0], other[0])
    assert not np.array_equal(first[0][:, 0], first[0][:, 1])  # each sub-env gets a seed of its own


def test_a_vector_env_resets_an_ended_sub_env_in_the_same_step_and_keeps_its_last_observation():
    envs = make_vector_env("CartPole-v1", 1, seed=0)
    try:
        for _ in range(500):
            observation, _, terminated, truncated, infos = envs.step(np.array([1]))  # always push right: falls fast
            if terminated[0] or truncated[0]:
                break
        else:
            raise AssertionError("pushing right never ended an episode")
    finally:
        envs.close()
    last = infos["final_obs"][0]
    assert abs(last[2]) > 0.2 or abs(last[0]) > 2.4  # the real end: out of bounds
    assert np.abs(observation[0]).max() <= 0.05  # already the next episode's first observation
    assert finished_episodes(infos) and finished_episodes(infos)[0][1] < 500
    real = real_next_observations(observation, terminated | truncated, infos)
    np.testing.assert_array_equal(real[0], last)
    assert np.abs(observation[0]).max() <= 0.05  # the given array is not changed


def test_real_next_observations_replaces_only_the_rows_that_ended():
    next_observations = np.arange(6, dtype=np.float32).reshape(3, 2)
    infos = {"final_obs": np.array([None, np.array([10.0, 11.0]), None], dtype=object)}
    real = real_next_observations(next_observations, np.array([False, True, False]), infos)
    np.testing.assert_array_equal(real, [[0, 1], [10, 11], [4, 5]])
    np.testing.assert_array_equal(next_observations[1], [2, 3])


def test_finished_episodes_reads_the_return_and_length_of_each_ended_sub_env():
    infos = {"final_info": {"episode": {"r": np.array([0.0, 12.5, 3.0]), "l": np.array([0, 13, 4])},
                            "_episode": np.array([False, True, True])}}
    assert finished_episodes(infos) == [(12.5, 13), (3.0, 4)]
    assert finished_episodes({}) == []
    assert finished_episodes({"final_info": {}}) == []


def test_make_env_records_the_real_return_of_each_episode():
    env = make_env("CartPole-v1")
    try:
        env.reset(seed=0)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(0)
            total += reward
            done = terminated or truncated
    finally:
        env.close()
    assert info["episode"]["r"] == total and info["episode"]["l"] == int(total)  # CartPole pays 1 a step


def test_cartpole_without_velocity_observes_only_position_and_angle():
    env = make_env("rlweb/CartPoleNoVelocity-v1")
    try:
        observation, _ = env.reset(seed=0)
        assert env.observation_space.shape == (2,) and observation.shape == (2,)
        full = make_env("CartPole-v1")
        try:
            full_observation, _ = full.reset(seed=0)
        finally:
            full.close()
        np.testing.assert_array_equal(observation, full_observation[[0, 2]])
    finally:
        env.close()


def test_env_spaces_gives_copies_that_callers_may_change():
    observation_space, action_space = env_spaces("CartPole-v1")
    assert isinstance(observation_space, spaces.Box) and observation_space.shape == (4,)
    assert action_space == spaces.Discrete(2)
    observation_space.low[:] = 0.0
    assert env_spaces("CartPole-v1")[0].low[0] < 0


@pytest.mark.parametrize("space", [
    spaces.Box(low=np.array([-1.0, 0.0], dtype=np.float32), high=np.array([1.0, 5.0], dtype=np.float32)),
    spaces.Box(0, 255, (84, 84, 4), dtype=np.uint8),
    spaces.Discrete(6, start=-2),
    spaces.MultiDiscrete([3, 4]),
    spaces.MultiBinary(5),
], ids=["box", "image", "discrete", "multidiscrete", "multibinary"])
def test_a_space_survives_its_json_form(space):
    again = space_from_json(space_to_json(space))
    assert again == space and type(again) is type(space)


def test_space_from_json_refuses_what_space_to_json_never_writes():
    with pytest.raises(ValueError, match="unsupported space"):
        space_from_json({"type": "Graph"})
    with pytest.raises(ValueError, match="holds more than"):
        space_from_json({"type": "Box", "shape": [2**13, 2**13], "dtype": "float32", "low": [0], "high": [1]})
    with pytest.raises(ValueError, match="unsupported dtype"):
        space_from_json({"type": "Box", "shape": [1], "dtype": "object", "low": [0], "high": [1]})
