"""The memory a run needs, estimated from its config and spaces before anything is built or queued.

The networks are built on PyTorch's meta device (shapes without storage), so their size is exact for every
algorithm without a formula per network; replay and rollout storage follow the buffers in `buffers.py`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from trainer.envs import is_atari
from trainer.params import ConfigError

MAX_MEMORY_VARIABLE = "RLWEB_MAX_RUN_MEMORY_MB"
DEFAULT_FRACTION = 0.5  # of this machine's memory, for one run
# float32 numbers kept per network number: the value, its gradient and Adam's two moments
COPIES_PER_PARAMETER = 4
NETWORK_FIELDS = ("hidden_layers", "rnd_hidden_layers", "lstm_size", "grid_size")
WORKER_PROCESS_BYTES = 256 * 2**20  # a spawned worker that imports torch and Gymnasium (ES) holds about this


@dataclass
class Estimate:
    network_numbers: int  # parameters and buffers of every module
    network_bytes: int  # with gradients and optimizer state
    data_bytes: int  # replay or rollout storage
    network_field: str  # the hyperparameter that sizes the networks
    data_field: str | None  # the one that sizes the storage
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # checkpoint tensor name -> shape
    dtypes: dict[str, torch.dtype] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return self.network_bytes + self.data_bytes


def machine_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def max_run_bytes() -> int:
    """The most memory one run may plan for: RLWEB_MAX_RUN_MEMORY_MB, or half of this machine's memory."""
    text = os.environ.get(MAX_MEMORY_VARIABLE, "").strip()
    if text and text != "0":
        try:
            megabytes = float(text)
        except ValueError:
            raise ValueError(f"{MAX_MEMORY_VARIABLE} must be a number of megabytes, got {text!r}") from None
        if math.isfinite(megabytes) and megabytes > 0:
            return int(megabytes * 2**20)
        raise ValueError(f"{MAX_MEMORY_VARIABLE} must be a positive number of megabytes, got {text!r}")
    return int(machine_memory_bytes() * DEFAULT_FRACTION)


def skeleton(spec, config, observation_space, action_space, env_id: str):
    """The agent with every tensor on the meta device: the real shapes, no memory."""
    with torch.device("meta"):
        return spec.agent_class(env_id, config, device=torch.device("meta"), observation_space=observation_space,
                                action_space=action_space)


def estimate(spec, config, observation_space, action_space, env_id: str) -> Estimate:
    try:
        agent = skeleton(spec, config, observation_space, action_space, env_id)
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError({"env_id": f"{spec.name} cannot be built for this environment: {error}"}) from error
    shapes, dtypes = {}, {}
    for module_name, module in agent.modules.items():
        for key, tensor in module.state_dict().items():
            shapes[f"{module_name}.{key}"] = tuple(tensor.shape)
            dtypes[f"{module_name}.{key}"] = tensor.dtype
    numbers = sum(math.prod(shape) for shape in shapes.values())
    network_bytes = sum(math.prod(shapes[name]) * dtypes[name].itemsize for name in shapes) * COPIES_PER_PARAMETER
    data_bytes, data_field = storage_bytes(config, observation_space, action_space, env_id)
    network_field = next((name for name in NETWORK_FIELDS if hasattr(config, name)), "hidden_layers")
    return Estimate(numbers, network_bytes, data_bytes, network_field, data_field, shapes, dtypes)


def _space_bytes(space, dtype=None) -> int:
    shape = space.shape if space.shape is not None else ()
    return math.prod(shape) * np.dtype(dtype or space.dtype or np.float32).itemsize


def storage_bytes(config, observation_space, action_space, env_id: str) -> tuple[int, str | None]:
    """Bytes of the replay or rollout storage (or ES's worker processes) a config asks for, and the field
    that sizes it."""
    observation = _space_bytes(observation_space)
    action = max(_space_bytes(action_space), 8)
    if hasattr(config, "buffer_size"):  # off-policy replay
        capacity = int(config.buffer_size)
        if hasattr(config, "lstm_size"):  # R2D1: an observation and the recurrent state per step
            per_step = observation + 8 + 16 + 2 * 4 * int(config.lstm_size) + 16
        elif is_atari(env_id) and len(observation_space.shape or ()) == 3:  # each frame stored once
            per_step = math.prod(observation_space.shape[1:]) + action + 32
        else:  # observation and next observation
            per_step = 2 * observation + action + 32
        return capacity * per_step, "buffer_size"
    if hasattr(config, "n_steps") and hasattr(config, "num_envs"):  # on-policy rollouts
        steps = int(config.n_steps) * int(config.num_envs)
        return steps * (2 * observation + action + 14 * 4), "n_steps"
    if hasattr(config, "num_workers") and hasattr(config, "num_agents"):  # ES: worker processes
        workers = min(int(config.num_workers) or os.cpu_count() or 1, int(config.num_agents) // 2)
        return (workers * WORKER_PROCESS_BYTES if workers > 1 else 0), "num_workers"
    return 0, None


def check_memory(spec, config, observation_space, action_space, env_id: str) -> Estimate:
    """Raise ConfigError on the responsible field when the run would need more memory than allowed."""
    result = estimate(spec, config, observation_space, action_space, env_id)
    limit = max_run_bytes()
    if result.total_bytes <= limit:
        return result
    field_name = result.network_field
    if result.data_field is not None and result.data_bytes >= result.network_bytes:
        field_name = result.data_field
    raise ConfigError({field_name: (
        f"this run would need about {_size(result.total_bytes)} of memory ({_size(result.network_bytes)} for "
        f"the networks, {_size(result.data_bytes)} for stored experience), more than the "
        f"{_size(limit)} a run may use here ({MAX_MEMORY_VARIABLE}).")})


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"
