"""Atari presets beside the zoo's: CleanRL's EnvPool PPO, and the DQN family with several envs; and replay with
several envs keeps each frame once."""

import numpy as np
import pytest
import trainer
from trainer import presets
from trainer.buffers import FrameStackReplayBuffer


def test_ppo_has_cleanrls_envpool_settings_as_a_named_preset():
    chosen = presets.resolve("ppo", "ALE/Pong-v5", "cleanrl-envpool")
    assert "ppo_atari_envpool.py" in chosen.source and chosen.total_steps == 10_000_000
    config = trainer.make("ppo", "ALE/Pong-v5", preset="cleanrl-envpool", device="cpu").config
    # 8 envs x 128 steps in 4 minibatches of 256, 4 epochs; clip 0.1 kept constant, on the value loss too
    assert (config.num_envs, config.n_steps, config.batch_size, config.n_epochs) == (8, 128, 256, 4)
    assert (config.clip_range, config.clip_schedule, config.clip_value_loss, config.value_clip_range) == (
        0.1, "constant", True, 0.1)
    assert (config.learning_rate, config.lr_schedule, config.entropy_coef, config.value_coef) == (
        2.5e-4, "linear", 0.01, 0.25)
    assert config.vectorization == "ale"
    fast = trainer.make("ppo", "ALE/Pong-v5", preset="cleanrl-envpool-fast", device="cpu").config
    assert (fast.num_envs, fast.batch_size, fast.n_epochs, fast.clip_range, fast.value_clip_range) == (
        16, 256, 3, 0.2, 0.2)  # 16 x 128 in 8 minibatches


def test_atari_ppo_and_a2c_take_the_zoos_settings_by_default():
    ppo = trainer.make("ppo", "ALE/Pong-v5", preset="auto", device="cpu").config
    a2c = trainer.make("a2c", "ALE/Pong-v5", preset="auto", device="cpu").config
    assert (ppo.num_envs, ppo.n_steps, ppo.n_epochs, ppo.batch_size, ppo.clip_range) == (8, 128, 4, 256, 0.1)
    assert (a2c.num_envs, a2c.n_steps, a2c.optimizer, a2c.value_coef) == (16, 5, "rmsprop_tf", 0.25)
    assert ppo.vectorization == a2c.vectorization == "auto"  # ale, for an Atari id


@pytest.mark.parametrize("algorithm", ["dqn", "double-dqn", "c51", "rainbow"])
def test_the_dqn_family_has_atari_settings_with_eight_envs_and_one_update_per_four_env_steps(algorithm):
    single, several = presets.resolve(algorithm, "ALE/Pong-v5", "atari"), presets.resolve(
        algorithm, "ALE/Pong-v5", "atari-8-envs")
    assert several.values == {**single.values, "num_envs": 8, "vectorization": "ale", "replay_ratio": 0.25}
    trainer.validate(algorithm, "ALE/Pong-v5", several.values)


def test_dqn_with_eight_atari_envs_makes_one_update_per_four_env_steps():
    agent = trainer.make("dqn", "ALE/Pong-v5", seed=0, device="cpu", preset="atari-8-envs", learning_starts=64,
                         buffer_size=1_000, batch_size=4)
    updates = []
    original = agent.strategy.updates

    def counted(buffer, count, **kwargs):
        updates.append(count)
        return original(buffer, count, **kwargs)

    agent.strategy.updates = counted
    agent.learn(160, eval_episodes=0)
    assert set(updates) == {2} and sum(updates) == (160 - 64 + 8) // 4  # from the vector step that fills 64


def test_frame_deduplicated_replay_gives_back_every_envs_stacks_with_several_envs():
    """4 envs whose episodes last 3 to 6 steps (shorter than a stack, some), 60 vector steps into 64 slots (the ring
    wraps): every sampled transition's stacks are the ones that were added, padded with the episode's first frame."""
    num_envs, rng = 4, np.random.default_rng(0)
    buffer = FrameStackReplayBuffer(64, (4, 2, 2), np.uint8, num_envs=num_envs)
    count = iter(range(1, 10**5))

    def frame():  # a frame that no other one equals
        n = next(count)
        return np.array([[n % 256, n // 256], [0, 0]], dtype=np.uint8)

    def stack(frames):  # the last 4, the first repeated before the episode began
        return np.stack([frames[max(0, len(frames) - 4 + k)] for k in range(4)])

    episodes, stored = [[frame()] for _ in range(num_envs)], {}
    for _ in range(60):
        obs = np.stack([stack(frames) for frames in episodes])
        for frames in episodes:
            frames.append(frame())
        real_next = np.stack([stack(frames) for frames in episodes])
        ended = np.array([len(frames) - 1 >= 3 + i for i, frames in enumerate(episodes)])
        slots = buffer.add(obs, np.zeros(num_envs), np.zeros(num_envs), real_next, ended, np.zeros(num_envs, bool))
        for i, slot in enumerate(slots):
            stored[int(slot)] = (obs[i], real_next[i])
        for i in np.flatnonzero(ended):
            episodes[i] = [frame()]
    indices = buffer.sample_indices(512, rng)
    obs, next_obs = buffer.observations_at(indices), buffer.next_observations_at(indices)
    for row, slot in enumerate(indices):
        np.testing.assert_array_equal(obs[row], stored[int(slot)][0])
        np.testing.assert_array_equal(next_obs[row], stored[int(slot)][1])
    # one 84x84 frame per transition and a few bytes beside it, whatever the number of envs (about 7 KB)
    big = FrameStackReplayBuffer(8_000, (4, 84, 84), np.uint8, num_envs=8)
    assert 7_000 < big.bytes_per_transition() < 7_200
