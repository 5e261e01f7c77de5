"""vectorization=async: each env in a process of its own (Gymnasium's AsyncVectorEnv), the same
transitions as sync, workers out of the trainer's process group, and the command line safe to spawn from."""

import os
import subprocess
import sys

import numpy as np
import pytest
import trainer
from gymnasium.vector import AsyncVectorEnv
from trainer.envs import make_vector_env


def rollout(vectorization: str, steps: int = 60):
    envs = make_vector_env("CartPole-v1", 3, seed=7, vectorization=vectorization)
    try:
        observations, _ = envs.reset(seed=7)
        seen, rng = [observations], np.random.default_rng(0)
        for _ in range(steps):
            observations, rewards, terminated, truncated, infos = envs.step(rng.integers(0, 2, 3))
            seen.append(np.concatenate([observations, rewards[:, None], terminated[:, None]], axis=1))
        return envs, seen
    finally:
        envs.close()


def test_async_envs_step_in_processes_of_their_own_and_give_the_same_transitions_as_sync():
    envs, async_seen = rollout("async")
    assert isinstance(envs, AsyncVectorEnv)
    _, sync_seen = rollout("sync")
    for mine, theirs in zip(async_seen, sync_seen):
        np.testing.assert_array_equal(mine, theirs)


def test_async_workers_leave_the_trainers_process_group():
    envs = make_vector_env("CartPole-v1", 2, seed=0, vectorization="async")
    try:
        groups = {os.getpgid(process.pid) for process in envs.processes}
        assert os.getpgid(0) not in groups and len(groups) == 2
    finally:
        envs.close()


def test_vectorization_is_a_hyperparameter_of_every_algorithm_with_several_envs():
    for algorithm in trainer.algorithm_names():
        names = {p.name for p in trainer.get_spec(algorithm).params()}
        if "num_envs" in names and algorithm != "qlearning":  # the tabular one steps trivial envs
            assert "vectorization" in names, algorithm


@pytest.mark.slow
def test_ppo_learns_the_same_with_async_envs_as_with_sync_ones():
    summaries = [trainer.make("ppo", "CartPole-v1", seed=0, vectorization=vectorization, num_envs=4, n_steps=64,
                              batch_size=64).learn(4_000, eval_episodes=2) for vectorization in ("sync", "async")]
    assert summaries[0]["eval_return_mean"] == summaries[1]["eval_return_mean"]


@pytest.mark.slow
def test_the_command_line_trains_with_async_envs(tmp_path):
    done = subprocess.run([sys.executable, "-m", "trainer", "train", "ppo", "CartPole-v1", "--total-steps", "512",
                           "--out", str(tmp_path), "--set", "vectorization=async", "--set", "num_envs=2",
                           "--set", "n_steps=64", "--set", "batch_size=64"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "final.zip").exists() and done.stdout.count('"status": "succeeded"') == 1
