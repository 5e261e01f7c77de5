"""Environments: making them by id with clear errors, vector envs, and spaces as JSON."""

from __future__ import annotations

import difflib
import functools

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from trainer.params import ConfigError


@functools.cache
def _register_atari() -> None:
    """Register the ALE ids and rlweb's own envs (once)."""
    gym.register("rlweb/CartPoleNoVelocity-v1", entry_point=cartpole_without_velocity, reward_threshold=475.0)
    try:
        import ale_py
    except ImportError:  # Atari is optional: the wheel may be missing on exotic platforms
        return
    gym.register_envs(ale_py)


def cartpole_without_velocity(**kwargs) -> gym.Env:
    """CartPole-v1 observing only the cart position and pole angle: a partially observed task that
    needs memory (as RLlib's StatelessCartPole)."""
    env = gym.make("CartPole-v1", **kwargs)
    keep = [0, 2]
    space = spaces.Box(env.observation_space.low[keep], env.observation_space.high[keep], dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda observation: observation[keep], space)


def known_env_ids() -> list[str]:
    """Every registered Gymnasium id (classic control, toy text, Box2D/MuJoCo when installed, Atari)."""
    _register_atari()
    return sorted(gym.registry.keys())


def is_atari(env_id: str) -> bool:
    _register_atari()
    spec = gym.registry.get(env_id)
    return spec is not None and "ale_py" in str(spec.entry_point)


def make_env(env_id: str, render_mode: str | None = None, training: bool = False, **kwargs) -> gym.Env:
    """`gym.make` with a message a user can act on when the id is wrong or a dependency is missing.

    Every env records its episode statistics (`info["episode"]`) before anything changes rewards or
    episode ends, so reported returns are real scores (ALGORITHMS.md, P4). Atari ids get the standard
    preprocessing; `training` adds the training-only wrappers (episodic life, reward clipping).
    """
    _register_atari()
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    atari = is_atari(env_id)
    if atari:
        kwargs.setdefault("frameskip", 1)  # AtariPreprocessing skips frames itself, with max-pooling
    try:
        env = gym.make(env_id, **kwargs)
    except (gym.error.NameNotFound, gym.error.NamespaceNotFound, gym.error.VersionNotFound) as error:
        close = difflib.get_close_matches(env_id, known_env_ids(), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError({"env_id": f"Unknown environment id '{env_id}'.{hint}"}) from error
    except gym.error.DependencyNotInstalled as error:
        raise ConfigError({"env_id": f"'{env_id}' needs a package that is not installed: {error}"}) from error
    except gym.error.Error as error:
        raise ConfigError({"env_id": f"Cannot make '{env_id}': {error}"}) from error
    if not atari:
        return gym.wrappers.RecordEpisodeStatistics(env)
    return atari_wrappers(env, training)


def atari_wrappers(env: gym.Env, training: bool, frame_stack: int = 4) -> gym.Env:
    """No-op reset, 4-frame skip with max-pooling, 84x84 grayscale (Gymnasium's AtariPreprocessing);
    fire on reset where the game needs it; for training, a lost life ends the episode and rewards are
    clipped to their sign; finally a stack of the last `frame_stack` frames (ALGORITHMS.md, P7)."""
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
    env = gym.wrappers.RecordEpisodeStatistics(env)  # whole-game score, before life loss and clipping
    if training:
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    if training:
        env = gym.wrappers.TransformReward(env, lambda reward: float(np.sign(reward)))
    return gym.wrappers.FrameStackObservation(env, frame_stack)


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode for the learner; the game itself is only reset when it is over."""

    def __init__(self, env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return observation, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            observation, info = self.env.reset(**kwargs)
        else:  # a no-op step continues the game from the state after the lost life
            observation, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                observation, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return observation, info


class FireReset(gym.Wrapper):
    """Press FIRE after a reset, for games that wait for it (Farama-Foundation/Gymnasium#805)."""

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        observation, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            observation, info = self.env.reset(**kwargs)
        return observation, info


def finished_episodes(infos: dict) -> list[tuple[float, int]]:
    """(return, length) of each episode a vector step finished, from the recorded statistics.

    With episodic life a lost life ends the learner's episode but not the game; only whole games
    are reported.
    """
    final = infos.get("final_info")
    if not final or "episode" not in final:
        return []
    episode, mask = final["episode"], final["_episode"]
    return [(float(episode["r"][i]), int(episode["l"][i])) for i in np.flatnonzero(mask)]


def env_spaces(env_id: str) -> tuple[spaces.Space, spaces.Space]:
    """(observation_space, action_space) of an env id, raising ConfigError for a bad id."""
    env = make_env(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def make_vector_env(env_id: str, num_envs: int, seed: int) -> gym.vector.VectorEnv:
    """A synchronous vector env that resets finished sub-envs in the same step.

    SAME_STEP autoreset puts the real last observation of an episode in `infos["final_obs"]`, so no
    transition ever crosses an episode boundary (ALGORITHMS.md, P2).
    """
    _register_atari()
    make_one = functools.partial(make_env, env_id, training=True)
    envs = gym.vector.SyncVectorEnv([make_one for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    return envs


def space_to_json(space: spaces.Space) -> dict:
    if isinstance(space, spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": str(space.dtype),
                "low": space.low.tolist(), "high": space.high.tolist()}
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    raise ValueError(f"unsupported space {space}")


def space_from_json(data: dict) -> spaces.Space:
    kind = data.get("type")
    if kind == "Box":
        low = np.asarray(data["low"], dtype=data["dtype"])
        high = np.asarray(data["high"], dtype=data["dtype"])
        return spaces.Box(low=low, high=high, shape=tuple(data["shape"]), dtype=np.dtype(data["dtype"]))
    if kind == "Discrete":
        return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(data["nvec"], dtype=np.int64))
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    raise ValueError(f"unsupported space in checkpoint: {kind!r}")


def space_name(space: spaces.Space) -> str:
    return type(space).__name__
