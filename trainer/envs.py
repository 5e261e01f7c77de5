"""Environments: making them by id with clear errors, vector envs, and spaces as JSON."""

from __future__ import annotations

import copy
import difflib
import functools
import importlib.metadata
import importlib.util
import math
import os

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from trainer.params import ConfigError


@functools.cache
def _register_atari() -> None:
    """Register the ALE ids, rlweb's own envs and the installed packages' envs (once)."""
    gym.register("rlweb/CartPoleNoVelocity-v1", entry_point=cartpole_without_velocity, reward_threshold=475.0)
    register_env_plugins()
    try:
        import ale_py
    except ImportError:  # Atari is optional: the wheel may be missing on exotic platforms
        return
    gym.register_envs(ale_py)


ENV_ENTRY_POINT_GROUP = "gymnasium.envs"
BROKEN_ENV_PLUGINS: dict[str, str] = {}  # "package: entry point" -> the error its registration raised


def register_env_plugins() -> None:
    """Run the registration of every installed package's `gymnasium.envs` entry point, as gym 0.26 did (Gymnasium
    1.x declares the group but no longer loads it): a function that calls `gymnasium.register`, or a module that
    does when imported; an entry point named `__root__` registers ids without a namespace, any other name is their
    namespace. One that raises is kept in BROKEN_ENV_PLUGINS with its error; the others still register."""
    for entry_point in importlib.metadata.entry_points(group=ENV_ENTRY_POINT_GROUP):
        namespace = None if entry_point.name == "__root__" else entry_point.name
        registration = gym.envs.registration
        before, registration.current_namespace = registration.current_namespace, namespace
        try:  # (Gymnasium's own `namespace()` leaves its namespace set when the code inside raises)
            loaded = entry_point.load()
            if callable(loaded):
                loaded()
        except Exception as error:  # a plugin's code: whatever it raises, the other envs stay usable
            package = entry_point.dist.name if entry_point.dist else "?"
            BROKEN_ENV_PLUGINS[f"{package}: {entry_point.value}"] = f"{type(error).__name__}: {error}"
        finally:
            registration.current_namespace = before


def cartpole_without_velocity(**kwargs) -> gym.Env:
    """CartPole-v1 observing only the cart position and pole angle: a partially observed task that
    needs memory (as RLlib's StatelessCartPole)."""
    env = gym.make("CartPole-v1", **kwargs)
    keep = [0, 2]
    space = spaces.Box(env.observation_space.low[keep], env.observation_space.high[keep], dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda observation: observation[keep], space)


MAX_ENV_ID_LENGTH = 200
ENV_MODULES_VARIABLE = "RLWEB_ENV_MODULES"
_unmakeable: set[str] = set()  # ids whose make failed in this process: left out of the suggestions


def allowed_env_modules() -> set[str]:
    """Modules an admin allows in `module:EnvId` ids (RLWEB_ENV_MODULES, comma-separated; none by default)."""
    return {name.strip() for name in os.environ.get(ENV_MODULES_VARIABLE, "").split(",") if name.strip()}


def check_env_id(env_id) -> None:
    """Refuse an env id before Gymnasium sees it, importing nothing.

    `gym.make("module:EnvId")` imports `module` (any module on the path: the trainer's own command line,
    a file in the current folder), so that form is only accepted for modules listed in RLWEB_ENV_MODULES;
    every other id must already be in Gymnasium's registry. Raises ConfigError({"env_id": ...}).
    """
    if not isinstance(env_id, str) or not env_id.strip():
        raise ConfigError({"env_id": "Give an environment id, e.g. CartPole-v1."})
    if len(env_id) > MAX_ENV_ID_LENGTH or not env_id.isprintable():
        raise ConfigError({"env_id": f"An environment id is at most {MAX_ENV_ID_LENGTH} printable characters."})
    module, colon, _ = env_id.partition(":")
    if colon:
        if module in allowed_env_modules():
            return
        raise ConfigError({"env_id": f"'{env_id}' names a Python module to import ('{module}'); only modules an "
                                     f"admin lists in {ENV_MODULES_VARIABLE} may be used. Use a registered id, "
                                     "e.g. CartPole-v1."})
    _register_atari()
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, known_env_ids(), n=3)  # only ids that can be made here
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError({"env_id": f"Unknown environment id '{env_id}'.{hint}"})


def known_env_ids() -> list[str]:
    """The registered Gymnasium ids that can be made here (classic control, toy text, Box2D/MuJoCo when
    installed, Atari), for suggestions; judged by rules on each id's entry point, without making any."""
    _register_atari()
    return sorted(env_id for env_id, spec in gym.registry.items()
                  if env_id not in _unmakeable and _entry_point_available(spec.entry_point))


@functools.cache
def _module_available(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _entry_point_available(entry_point) -> bool:
    """False for entry points that cannot work here: Gymnasium's placeholders that only raise (MuJoCo v2/v3
    ids that need mujoco-py, the gym compatibility envs that need shimmy) and the functional JAX envs
    (`phys2d/`, `tabular/`) when JAX is missing."""
    if callable(entry_point):
        return not getattr(entry_point, "__name__", "").startswith("_raise")
    module = str(entry_point).partition(":")[0]
    if module.startswith(("gymnasium.envs.phys2d", "gymnasium.envs.tabular", "gymnasium.envs.functional_jax")):
        return _module_available("jax")
    if module == "gymnasium.envs.mujoco.pusher_v4":  # refuses MuJoCo 3 (Farama-Foundation/Gymnasium#950)
        return _major_version("mujoco") < 3
    return True


@functools.cache
def _major_version(distribution: str) -> int:
    """The installed major version of a distribution, read from its metadata (nothing imported); 0 if absent."""
    try:
        return int(importlib.metadata.version(distribution).split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 0


def is_atari(env_id: str) -> bool:
    _register_atari()
    spec = gym.registry.get(env_id)
    return spec is not None and "ale_py" in str(spec.entry_point)


def make_env(env_id: str, render_mode: str | None = None, training: bool = False, **kwargs) -> gym.Env:
    """`gym.make` with a message a user can act on when the id is wrong, a dependency is missing or the
    env fails to build; the id is checked first (`check_env_id`), so no module is ever imported by it.

    Every env records its episode statistics (`info["episode"]`) before anything changes rewards or
    episode ends, so reported returns are real scores (docs/algorithms.md, P4). Atari ids get the standard
    preprocessing; `training` adds the training-only wrappers (episodic life, reward clipping).
    """
    check_env_id(env_id)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    atari = is_atari(env_id)
    if atari:
        kwargs.setdefault("frameskip", 1)  # AtariPreprocessing skips frames itself, with max-pooling
    try:
        env = gym.make(env_id, **kwargs)
        return atari_wrappers(env, training) if atari else gym.wrappers.RecordEpisodeStatistics(env)
    except MemoryError:
        raise
    except gym.error.DependencyNotInstalled as error:
        _unmakeable.add(env_id)
        raise ConfigError({"env_id": f"'{env_id}' needs a package that is not installed: {error}"}) from error
    except Exception as error:  # noqa: BLE001  (a registered env that cannot be built here, for any reason)
        _unmakeable.add(env_id)
        reason = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
        raise ConfigError({"env_id": f"'{env_id}' cannot be made here: {reason}"}) from error


def atari_wrappers(env: gym.Env, training: bool, frame_stack: int = 4) -> gym.Env:
    """No-op reset, 4-frame skip with max-pooling, 84x84 grayscale (Gymnasium's AtariPreprocessing);
    fire on reset where the game needs it; for training, a lost life ends the episode and rewards are
    clipped to their sign; finally a stack of the last `frame_stack` frames (docs/algorithms.md, P7)."""
    # random no-ops at reset need a NOOP action first (Backgammon and Video Checkers have none)
    noop_max = 30 if env.unwrapped.get_action_meanings()[0] == "NOOP" else 0
    env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=4, screen_size=84,
                                          grayscale_obs=True)
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
    """(observation_space, action_space) of an env id, raising ConfigError for a bad id.

    Kept per registered spec: making an Atari env takes a tenth of a second, and the form asks on every post.
    """
    check_env_id(env_id)
    observation_space, action_space = _spaces_of(env_id, id(gym.registry.get(env_id)))
    return copy.deepcopy(observation_space), copy.deepcopy(action_space)


@functools.lru_cache(maxsize=1024)
def _spaces_of(env_id: str, spec_identity: int) -> tuple[spaces.Space, spaces.Space]:
    env = make_env(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def make_vector_env(env_id: str, num_envs: int, seed: int, vectorization: str = "sync") -> gym.vector.VectorEnv:
    """A vector env that resets finished sub-envs in the same step: stepped one after the other in this
    process (`sync`), each in a process of its own (`async`, Gymnasium's AsyncVectorEnv), or, for Atari ids,
    together in ale-py's C++ vector env (`ale`, `AtariVector`); `auto` is `ale` for Atari ids, else `sync`.

    SAME_STEP autoreset puts the real last observation of an episode in `infos["final_obs"]`, so no
    transition ever crosses an episode boundary (docs/algorithms.md, P2). Async workers are spawned (no fork
    of a process with torch's threads) into process groups of their own, so a stop signal to the training
    process's group (Ctrl-C of `make run`, a worker's shutdown) reaches the run, which then closes them,
    instead of killing them mid-step.
    """
    _register_atari()
    vectorization = chosen_vectorization(env_id, vectorization)
    if vectorization == "ale":
        envs = AtariVector(env_id, num_envs)
    elif vectorization == "async":
        make_one = functools.partial(make_env_in_own_process_group, env_id)
        envs = gym.vector.AsyncVectorEnv([make_one for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP,
                                         context="spawn", daemon=True)
    else:
        make_one = functools.partial(make_env, env_id, training=True)
        envs = gym.vector.SyncVectorEnv([make_one for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    return envs


def chosen_vectorization(env_id: str, vectorization: str) -> str:
    """`auto` made concrete: `ale` for Atari ids (when ale-py has its vector env), else `sync`. ConfigError for
    `ale` on an id that is not Atari."""
    if vectorization == "auto":
        return "ale" if is_atari(env_id) and _module_available("ale_py.vector_env") else "sync"
    if vectorization == "ale" and not is_atari(env_id):
        raise ConfigError({"vectorization": f"ale steps only Atari envs (ALE/...), not {env_id}; use sync or async."})
    return vectorization


def cores() -> int:
    """The cores this process may run on (its affinity, as a container or taskset limits it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@functools.cache
def _action_meanings(env_id: str) -> tuple[str, ...]:
    env = gym.make(env_id)
    try:
        return tuple(env.unwrapped.get_action_meanings())
    finally:
        env.close()


def ale_settings(env_id: str, num_envs: int, num_threads: int = 0) -> dict:
    """The arguments of ale-py's AtariVectorEnv that step `env_id` as our wrappers do, without the clipping and
    life losses (AtariVector does those, keeping the real scores)."""
    settings = gym.registry[env_id].kwargs
    meanings = _action_meanings(env_id)
    return dict(
        game=settings["game"], num_envs=num_envs, num_threads=num_threads or min(num_envs, cores()),
        repeat_action_probability=float(settings.get("repeat_action_probability", 0.25)),
        full_action_space=bool(settings.get("full_action_space", False)),
        max_num_frames_per_episode=int(settings.get("max_num_frames_per_episode") or 108_000),
        frameskip=4, maxpool=True, img_height=84, img_width=84, grayscale=True, stack_num=4,
        noop_max=30 if meanings[0] == "NOOP" else 0, use_fire_reset="FIRE" in meanings,
        episodic_life=False, life_loss_info=False, reward_clipping=False,
        autoreset_mode=AutoresetMode.SAME_STEP)


class AtariVector(gym.vector.VectorEnv):
    """An Atari id's training envs stepped together by ale-py's `AtariVectorEnv` (C++ threads, one per core at
    most), with the semantics of `make_env(env_id, training=True)` in a vector env:

    - the id's own emulator settings: sticky actions (0.25 for v5 ids, none for NoFrameskip-v4), action set and
      episode cap in frames;
    - the same preprocessing: up to 30 random no-ops at reset, 4 frames per step max-pooled over the last two,
      84x84 grayscale, FIRE at reset for games that need it, a stack of the last 4 frames, oldest first;
    - the stack starts again, filled with its newest frame, when an episode starts (at a reset, and after a lost
      life), as Gymnasium's FrameStackObservation pads with the first observation (ale-py pads with zeros);
    - for the learner, a lost life ends the episode while the game goes on, and rewards are clipped to their
      sign; the statistics reported (`final_info["episode"]`: whole-game score and agent steps) are the real
      ones (docs/algorithms.md, P4, P7).

    One difference from the wrappers: after a lost life the game goes on without a FIRE press (as EnvPool's);
    the policy presses FIRE itself. Episodes end and reset in the same step (SAME_STEP: the real last
    observation in `infos["final_obs"]`).
    """

    def __init__(self, env_id: str, num_envs: int, num_threads: int = 0):
        from ale_py.vector_env import AtariVectorEnv

        self.env = AtariVectorEnv(**ale_settings(env_id, num_envs, num_threads))
        self.num_envs = num_envs
        self.single_observation_space = self.env.single_observation_space
        self.single_action_space = self.env.single_action_space
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.returns = np.zeros(num_envs)  # the game's score so far, unclipped
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.lives = np.zeros(num_envs, dtype=np.int64)
        self.episode_steps = np.zeros(num_envs, dtype=np.int64)  # the learner's: since a reset or a lost life

    def padded(self, observations: np.ndarray) -> np.ndarray:
        """The stacks with the frames from before the learner's episode began (ale-py's zeros after a reset, the
        last life's frames after a lost one) replaced by the episode's first frame, in place."""
        for i in np.flatnonzero(self.episode_steps < 3):
            first = 3 - self.episode_steps[i]
            observations[i, :first] = observations[i, first]
        return observations

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, info = self.env.reset(seed=seed)
        self.returns[:] = 0
        self.lengths[:] = 0
        self.lives[:] = info["lives"]
        self.episode_steps[:] = 0
        return self.padded(observations), {}

    def step(self, actions):
        observations, rewards, terminated, truncated, info = self.env.step(np.asarray(actions, dtype=np.int64))
        self.returns += rewards
        self.lengths += 1
        game_over = terminated | truncated
        lives = info["lives"]
        life_lost = ~game_over & (lives > 0) & (lives < self.lives)  # as EpisodicLife
        self.lives[:] = lives  # after a game over: the new game's
        ended = game_over | life_lost
        infos = {}
        if ended.any():
            final = observations.copy()  # after a lost life the last observation is the one returned
            if game_over.any():  # ale-py gives final_obs only when a game was reset
                final[game_over] = info["final_obs"][game_over]
            infos["final_obs"] = final
        if game_over.any():
            infos["final_info"] = {"episode": {"r": np.where(game_over, self.returns, 0.0),
                                               "l": np.where(game_over, self.lengths, 0)},
                                   "_episode": game_over.copy()}
            self.returns[game_over] = 0
            self.lengths[game_over] = 0
        self.episode_steps += 1
        self.episode_steps[ended] = 0
        return self.padded(observations), np.sign(rewards).astype(np.float64), terminated | life_lost, truncated, infos

    def close_extras(self, **kwargs):
        self.env.close()


def make_env_in_own_process_group(env_id: str) -> gym.Env:
    """An async vector env's worker: a training env, made after leaving the trainer's process group."""
    os.setpgrp()
    return make_env(env_id, training=True)


def real_next_observations(next_observations: np.ndarray, done: np.ndarray, infos: dict) -> np.ndarray:
    """The observation each sub-env's action led to: for one whose episode ended, its real last observation
    (SAME_STEP autoreset left it in `infos["final_obs"]`, and `next_observations` holds the reset one;
    docs/algorithms.md, P2); the others' are `next_observations` as they are (the same array when none ended)."""
    if not done.any():
        return next_observations
    real = next_observations.copy()
    for i in np.flatnonzero(done):
        real[i] = infos["final_obs"][i]
    return real


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


MAX_SPACE_ELEMENTS = 2**24  # numbers in one observation or action, for a space read from a file
SPACE_DTYPES = ("float16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64", "bool")


def _checked_shape(shape) -> tuple[int, ...]:
    if (not isinstance(shape, (list, tuple)) or len(shape) > 8
            or not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape)):
        raise ValueError(f"shape must be a list of at most 8 whole numbers, got {shape!r:.100}")
    if math.prod(shape) > MAX_SPACE_ELEMENTS:
        raise ValueError(f"shape {list(shape)} holds more than {MAX_SPACE_ELEMENTS:,} numbers")
    return tuple(shape)


def space_from_json(data: dict) -> spaces.Space:
    """The space `space_to_json` wrote; raises ValueError for anything else (sizes bounded, numbers only)."""
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "Box":
        shape = _checked_shape(data.get("shape"))
        if data.get("dtype") not in SPACE_DTYPES:
            raise ValueError(f"unsupported dtype {data.get('dtype')!r:.100}")
        low = np.asarray(data["low"], dtype=data["dtype"])
        high = np.asarray(data["high"], dtype=data["dtype"])
        if low.size not in (1, math.prod(shape)) or high.size not in (1, math.prod(shape)):
            raise ValueError("low and high must have one number or one per element of the shape")
        size = math.prod(shape)
        return spaces.Box(low=low.reshape(shape) if low.size == size else low.reshape(()),
                          high=high.reshape(shape) if high.size == size else high.reshape(()), shape=shape,
                          dtype=np.dtype(data["dtype"]))
    if kind == "Discrete":
        n, start = data.get("n"), data.get("start", 0)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, start)) or not (
                1 <= n <= 2**31 and abs(start) <= 2**31):
            raise ValueError(f"Discrete needs a whole n from 1 to 2^31 and a small start, got {n!r:.50}, {start!r:.50}")
        return spaces.Discrete(n, start=start)
    if kind == "MultiDiscrete":
        nvec = data.get("nvec")
        flat = np.asarray(nvec, dtype=np.int64) if isinstance(nvec, list) else None
        if flat is None or flat.size > MAX_SPACE_ELEMENTS or (flat.size and (flat.min() < 1 or flat.max() > 2**31)):
            raise ValueError("MultiDiscrete needs a list of whole numbers from 1 to 2^31")
        return spaces.MultiDiscrete(flat)
    if kind == "MultiBinary":
        n = data.get("n")
        shape = _checked_shape([n] if isinstance(n, int) and not isinstance(n, bool) else n)
        return spaces.MultiBinary(list(shape) if len(shape) > 1 else shape[0])
    raise ValueError(f"unsupported space in checkpoint: {kind!r:.100}")


def is_image_space(space: spaces.Space) -> bool:
    """uint8 Box observations of 2 or 3 dimensions are images (frames, or stacks of frames)."""
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)


def space_name(space: spaces.Space) -> str:
    return type(space).__name__
