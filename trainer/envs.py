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
    try:
        import ale_py
    except ImportError:  # Atari is optional: the wheel may be missing on exotic platforms
        return
    gym.register_envs(ale_py)


def known_env_ids() -> list[str]:
    """Every registered Gymnasium id (classic control, toy text, Box2D/MuJoCo when installed, Atari)."""
    _register_atari()
    return sorted(gym.registry.keys())


def make_env(env_id: str, render_mode: str | None = None, **kwargs) -> gym.Env:
    """`gym.make` with a message a user can act on when the id is wrong or a dependency is missing."""
    _register_atari()
    try:
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        return gym.make(env_id, **kwargs)
    except (gym.error.NameNotFound, gym.error.NamespaceNotFound, gym.error.VersionNotFound) as error:
        close = difflib.get_close_matches(env_id, known_env_ids(), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError({"env_id": f"Unknown environment id '{env_id}'.{hint}"}) from error
    except gym.error.DependencyNotInstalled as error:
        raise ConfigError({"env_id": f"'{env_id}' needs a package that is not installed: {error}"}) from error
    except gym.error.Error as error:
        raise ConfigError({"env_id": f"Cannot make '{env_id}': {error}"}) from error


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
    make_one = functools.partial(make_env, env_id)
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
