"""Presets: settings tuned for an algorithm on an environment, and family defaults where nobody tuned one.

Every algorithm's own defaults are tuned for CartPole (or Pendulum). A preset replaces them for one
environment: RL Baselines3 Zoo's tuned entries (`trainer/zoo_presets.py`, translated to our names by
`trainer/zoo.py`, which says which zoo keys have no equivalent here), or, for an environment the zoo does
not list, its family's defaults:

- Atari (every `ALE/` id): the zoo's `atari` entry for dqn, double-dqn, ppo and a2c; for the other DQN
  variants the same Nature-DQN-style settings; for rainbow Hessel et al.'s (2018, Table 1). Named beside it:
  `cleanrl-envpool` and `cleanrl-envpool-fast` (CleanRL's EnvPool PPO) and `atari-8-envs` (the DQN family's, with 8 envs);
- MuJoCo: the zoo's `mujoco-defaults` entry of sac, td3, ddpg, ppo and a2c.

The values a user sets go on top of a preset; `preset="none"` (`--preset none`) keeps the plain defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym

from trainer.envs import is_atari
from trainer.params import ConfigError
from trainer.zoo_presets import ZOO_PRESETS

AUTO, NONE = "auto", "none"
DQN_FAMILY = ("dqn", "double-dqn", "dueling-dqn", "noisy-dqn", "nstep-dqn", "per-dqn", "c51", "rainbow")


@dataclass(frozen=True)
class Preset:
    name: str  # what --preset and the form take: "zoo:Acrobot-v1", "atari", "mujoco"
    description: str  # what the form and the command line say: "RL Zoo: tuned for Acrobot-v1"
    source: str  # where the numbers come from, exactly
    values: dict  # hyperparameters, in our names
    total_steps: int | None = None  # the budget the source tuned for, where it says
    no_equivalent: dict = field(default_factory=dict)  # the source's keys that have no equivalent here: why


# Nature-DQN-style Atari settings of the DQN family, counted in env steps (4 frames each): RL Zoo's dqn.yml
# `atari` entry, SB3's defaults under it. Behind the Nature CNN's 512 units: no hidden layer, or one of 512
# units for dueling heads (value and advantage streams).
ATARI_DQN = dict(learning_rate=1e-4, buffer_size=100_000, learning_starts=100_000, batch_size=32, gamma=0.99, tau=1.0,
                 train_frequency=4, gradient_steps=1, target_update_interval=1_000, exploration_fraction=0.1,
                 exploration_initial_eps=1.0, exploration_final_eps=0.01, max_grad_norm=10.0, hidden_layers="none",
                 num_envs=1)
# Rainbow on Atari (Hessel et al. 2018, Table 1), in env steps: min history 80k frames, target period 32k
# frames; Adam 6.25e-5 / 1.5e-4; 3-step returns; 51 atoms on [-10, 10]; noisy nets sigma 0.5; priorities
# with exponent 0.5 and importance sampling from 0.4 to 1. The paper's buffer holds 1M transitions
# (about 7 GB here); this one holds 200k, which fits a worker with 4 GB to spare.
RAINBOW_ATARI = dict(learning_rate=6.25e-5, optimizer_epsilon=1.5e-4, buffer_size=200_000, learning_starts=20_000,
                     batch_size=32, gamma=0.99, tau=1.0, train_frequency=4, gradient_steps=1,
                     target_update_interval=8_000, n_step_return=3, noisy_std=0.5, priority_alpha=0.5,
                     priority_beta=0.4, v_min=-10.0, v_max=10.0, num_atoms=51, max_grad_norm=10.0,
                     hidden_layers="512", num_envs=1)
# CleanRL's cleanrl/ppo_atari_envpool.py defaults (8 EnvPool envs, 128 steps, 4 minibatches, 4 epochs, lr 2.5e-4
# annealed, clip 0.1 constant, clipped value loss, entropy 0.01), in our terms: its value loss is 0.5 x the mean
# square, times vf_coef 0.5, so value_coef 0.25 here; its EnvPool Pong-v5 has no sticky actions (PongNoFrameskip-v4
# here), ALE/Pong-v5 keeps v5's.
CLEANRL_ENVPOOL_PPO = dict(num_envs=8, vectorization="ale", n_steps=128, batch_size=256, n_epochs=4, gamma=0.99,
                           gae_lambda=0.95, learning_rate=2.5e-4, lr_schedule="linear", clip_range=0.1,
                           clip_schedule="constant", clip_value_loss=True, value_clip_range=0.1, entropy_coef=0.01,
                           value_coef=0.25, max_grad_norm=0.5, normalize_advantage=True, target_kl=0.0,
                           hidden_layers="none", orthogonal_init=True, optimizer_epsilon=1e-5)
# CleanRL's README: "Learn Pong-v5 in ~5-10 mins" with --clip-coef=0.2 --num-envs=16 --num-minibatches=8
# --num-steps=128 --update-epochs=3 (the value loss clipped at 0.2 too), the rest as above
CLEANRL_ENVPOOL_FAST_PPO = {**CLEANRL_ENVPOOL_PPO, "num_envs": 16, "batch_size": 256, "n_epochs": 3, "clip_range": 0.2,
                            "value_clip_range": 0.2}
# The DQN family's Atari settings with 8 envs stepped together (vectorization ale): a replay ratio of 1/4 keeps
# Nature DQN's one update per 4 env steps (2 per vector step); the target network still follows every 1,000 env steps.
SEVERAL_ENVS = dict(num_envs=8, vectorization="ale", replay_ratio=0.25)
MUJOCO_ZOO_ENTRY = {"sac": "HalfCheetah-v5", "td3": "HalfCheetah-v5", "ddpg": "HalfCheetah-v5", "ppo": "Ant-v5",
                    "a2c": "HalfCheetah-v5"}  # the entries the zoo's files mark `&mujoco-defaults`


def zoo_preset(algorithm: str, key: str, name: str, description: str = "") -> Preset | None:
    """The zoo's entry `key` (an env id, or "atari"); described as tuned for the zoo's own id (HalfCheetah-v4
    for our HalfCheetah-v5) unless `description` is given."""
    entry = ZOO_PRESETS.get((algorithm, key))
    if entry is None:
        return None
    tuned_for = entry["source"].rsplit(": ", 1)[-1]
    description = description or f"RL Zoo: tuned for {tuned_for}"
    return Preset(name, description, entry["source"], dict(entry["values"]), entry["total_steps"],
                  dict(entry["no_equivalent"]))


def is_mujoco(env_id: str) -> bool:
    spec = gym.registry.get(env_id)
    return spec is not None and isinstance(spec.entry_point, str) and spec.entry_point.startswith(
        "gymnasium.envs.mujoco")


def atari_preset(algorithm: str) -> Preset | None:
    if algorithm == "rainbow":
        return Preset("atari", "Rainbow's Atari settings (Hessel et al. 2018)",
                      "Hessel et al. 2018, Rainbow, Table 1 (frames counted as env steps of 4 frames)", RAINBOW_ATARI)
    zoo = zoo_preset(algorithm, "atari", "atari", "RL Zoo: its Atari settings")
    if zoo is not None or algorithm not in DQN_FAMILY:
        return zoo
    values = {**ATARI_DQN, "hidden_layers": "512"} if algorithm == "dueling-dqn" else ATARI_DQN
    return Preset("atari", "Nature-DQN-style Atari settings (as RL Zoo's dqn)",
                  "RL Zoo 2.9.2, hyperparams/dqn.yml: atari, on top of stable-baselines3's DQN defaults",
                  dict(values))


def atari_named_presets(algorithm: str) -> list[Preset]:
    """The named Atari presets beside `atari`: CleanRL's EnvPool PPO, and the DQN family with several envs."""
    if algorithm == "ppo":
        return [Preset("cleanrl-envpool", "CleanRL's EnvPool PPO for Atari (8 envs in ale-py's vector env)",
                       "CleanRL cleanrl/ppo_atari_envpool.py defaults (vwxyzjn/cleanrl); vf_coef 0.5 on half the "
                       "squared error is value_coef 0.25 here", dict(CLEANRL_ENVPOOL_PPO), 10_000_000),
                Preset("cleanrl-envpool-fast", "CleanRL's EnvPool PPO that learns Pong in minutes (16 envs, clip 0.2, "
                       "3 epochs of 8 minibatches)", "CleanRL README, ppo_atari_envpool.py --clip-coef=0.2 "
                       "--num-envs=16 --num-minibatches=8 --num-steps=128 --update-epochs=3 (vwxyzjn/cleanrl)",
                       dict(CLEANRL_ENVPOOL_FAST_PPO), 10_000_000)]
    if algorithm in DQN_FAMILY:
        base = atari_preset(algorithm)
        return [Preset("atari-8-envs", f"{base.description}, with 8 envs stepped together (1 update per 4 env steps)",
                       f"{base.source}; 8 envs and replay_ratio 0.25 added", {**base.values, **SEVERAL_ENVS},
                       base.total_steps, dict(base.no_equivalent))]
    return []


def mujoco_preset(algorithm: str) -> Preset | None:
    entry = MUJOCO_ZOO_ENTRY[algorithm]
    return zoo_preset(algorithm, entry, "mujoco", f"RL Zoo: its MuJoCo defaults (tuned for {entry.replace('v5', 'v4')})")


def find(algorithm: str, env_id: str) -> Preset | None:
    """The preset for this algorithm on this environment, or None (the algorithm's own defaults)."""
    tuned = zoo_preset(algorithm, env_id, f"zoo:{env_id}")
    if tuned is not None:
        return tuned
    if is_atari(env_id):
        return atari_preset(algorithm)
    if algorithm in MUJOCO_ZOO_ENTRY and is_mujoco(env_id):
        return mujoco_preset(algorithm)
    return None


def listing(algorithm: str) -> list[Preset]:
    """Every preset the algorithm has: tuned ones by environment, then the family defaults."""
    tuned = [zoo_preset(algorithm, key, f"zoo:{key}")
             for (name, key) in sorted(ZOO_PRESETS) if name == algorithm and key != "atari"]
    families = [atari_preset(algorithm), *atari_named_presets(algorithm)]
    if algorithm in MUJOCO_ZOO_ENTRY:
        families.append(mujoco_preset(algorithm))
    return [preset for preset in tuned + families if preset is not None]


def resolve(algorithm: str, env_id: str, preset: str | None) -> Preset | None:
    """`auto`: the preset for the environment (or None); `none` (or None): no preset; else a name from
    `listing`. ConfigError for a name the algorithm does not have."""
    if preset is None or preset == NONE:
        return None
    if preset == AUTO:
        return find(algorithm, env_id)
    for candidate in listing(algorithm):
        if candidate.name == preset:
            return candidate
    names = ", ".join([AUTO, NONE, *(candidate.name for candidate in listing(algorithm))])
    raise ConfigError({"preset": f"{algorithm} has no preset {preset!r} (known: {names})"})
