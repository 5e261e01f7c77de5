"""The real next observation after a SAME_STEP autoreset: one helper (trainer.envs.real_next_observations)
that every algorithm stores transitions with, so none crosses an episode boundary."""

import numpy as np
from trainer.envs import make_vector_env, real_next_observations


def step_until_an_episode_ends(envs):
    rng = np.random.default_rng(0)
    for _ in range(500):
        next_observations, _, terminated, truncated, infos = envs.step(rng.integers(0, 2, envs.num_envs))
        done = terminated | truncated
        if done.any() and not done.all():
            return next_observations, done, infos
    raise AssertionError("no episode ended alone within 500 steps")


def test_an_ended_sub_env_gets_its_real_last_observation_and_the_others_their_next_one():
    envs = make_vector_env("CartPole-v1", 3, seed=0)
    try:
        next_observations, done, infos = step_until_an_episode_ends(envs)
        real = real_next_observations(next_observations, done, infos)
    finally:
        envs.close()
    for i in range(3):
        expected = infos["final_obs"][i] if done[i] else next_observations[i]
        np.testing.assert_array_equal(real[i], expected)
    ended = np.flatnonzero(done)
    assert not np.array_equal(real[ended], next_observations[ended])  # not the reset observation
    assert np.abs(real[ended, 2]).max() > 0.2 or np.abs(real[ended, 0]).max() > 2.4  # CartPole ends out of bounds


def test_without_an_ended_episode_the_observations_are_passed_through_uncopied():
    observations = np.zeros((2, 4), dtype=np.float32)
    assert real_next_observations(observations, np.array([False, False]), {}) is observations
