"""Checkpoints: a zip of `config.json` and `model.safetensors`. Loading one never runs code (no pickle)."""

from __future__ import annotations

import json
import math
import os
import tempfile
import zipfile
import zlib
from pathlib import Path

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from trainer.envs import check_env_id, space_from_json, space_to_json
from trainer.registry import get_spec, missing_plugin, requirement
from trainer.resources import check_memory
from trainer.version import __version__

FORMAT = "rlweb-checkpoint"
FORMAT_VERSION = 1
MAX_CONFIG_BYTES = 10 * 2**20
MAX_MODEL_BYTES = 4 * 2**30
MAX_MEMBERS = 16
MAX_JSON_DEPTH = 64


class CheckpointError(ValueError):
    """The file is not a checkpoint this version can read."""


def save_checkpoint(agent, path: str | Path) -> Path:
    """Write `agent` to `path` atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for module_name, module in agent.modules.items():
        for key, tensor in module.state_dict().items():
            tensors[f"{module_name}.{key}"] = tensor.detach().cpu().contiguous()
    optimizer_groups = {}
    for optimizer_name, optimizer in agent.optimizers.items():
        state = optimizer.state_dict()
        optimizer_groups[optimizer_name] = state["param_groups"]
        for index, slots in state["state"].items():
            for slot, value in slots.items():
                value = value if torch.is_tensor(value) else torch.tensor(value)
                tensors[f"optimizer/{optimizer_name}/{index}/{slot}"] = value.detach().cpu().contiguous()
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "library_version": __version__,
        "algorithm": agent.name,
        "plugin": requirement(agent.name),  # "package version" of a plugin's algorithm; None: one of ours
        "env_id": agent.env_id,
        "hyperparameters": agent.hyperparameters(),
        "seed": agent.seed,
        "step": agent.steps_done,
        "best_eval_return": agent.best_eval_return,  # a resumed run's best checkpoint must beat it
        "eval_due": agent.eval_due,  # an evaluation a stop interrupted: the resumed run does it first
        "seconds_trained": agent.seconds_trained,  # a resumed run's clock goes on from here
        "observation_space": space_to_json(agent.observation_space),
        "action_space": space_to_json(agent.action_space),
        "extra_state": agent.extra_state(),
        "optimizers": optimizer_groups,
        # what made the run (trainer/provenance.py): code, versions, machine, the command that repeats it
        "environment": getattr(agent, "environment", None),
    }
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".checkpoint-", suffix=".zip")
    os.close(handle)
    try:
        with zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("config.json", json.dumps(config, indent=2))
            # stored, not deflated: float weights barely compress, and deflating a CNN's took seconds
            archive.writestr("model.safetensors", save_tensors(tensors), compress_type=zipfile.ZIP_STORED)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def read_checkpoint(path: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """The config and tensors of a checkpoint file, each member read with a bounded stream (a zip bomb is
    refused once MAX_MODEL_BYTES have been inflated). `load_checkpoint` reads with tighter bounds."""
    with open_archive(path) as archive:
        config = read_config(archive)
        return config, read_tensors(archive, MAX_MODEL_BYTES)


def open_archive(path: str | Path) -> zipfile.ZipFile:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise CheckpointError(f"not a checkpoint zip: {error}") from error
    names = set(archive.namelist())
    if len(archive.infolist()) > MAX_MEMBERS:
        archive.close()
        raise CheckpointError(f"a checkpoint zip holds config.json and model.safetensors, not {len(names):,} files")
    if "config.json" not in names or "model.safetensors" not in names:
        archive.close()
        raise CheckpointError("a checkpoint zip holds config.json and model.safetensors")
    return archive


def read_member(archive: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """The bytes of one member, refused when its declared or its actual size passes `limit`: the stream
    is read at most `limit + 1` bytes far, so memory stays bounded whatever the header claims."""
    info = archive.getinfo(name)
    if info.file_size > limit:
        raise CheckpointError(f"{name} declares {info.file_size:,} bytes, more than the {limit:,} that this "
                              "checkpoint's config can need")
    try:
        with archive.open(info) as stream:
            data = stream.read(limit + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError, OSError, ValueError) as error:
        raise CheckpointError(f"{name} cannot be read from the zip: {error}") from error
    if len(data) > limit:
        raise CheckpointError(f"{name} inflates to more than the {limit:,} bytes that this checkpoint's config "
                              "can need")
    return data


def parse_json(data: bytes, name: str):
    """JSON nested at most MAX_JSON_DEPTH deep (deeper values would break whatever walks them later)."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as error:  # RecursionError: brackets nested thousands deep
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise CheckpointError(f"{name} is not valid JSON: {reason}") from None
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            raise CheckpointError(f"{name} is not valid JSON: nested too deeply (more than {MAX_JSON_DEPTH} levels)")
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        pending.extend((child, depth + 1) for child in children)
    return value


# top-level fields of config.json and the types they must have
CONFIG_FIELDS = {"algorithm": str, "env_id": str, "hyperparameters": dict, "observation_space": dict,
                 "action_space": dict}
OPTIONAL_FIELDS = {"seed": int, "step": int, "extra_state": dict, "optimizers": dict}  # the clock, best
# return and environment are read leniently (older checkpoints lack them)


def read_config(archive: zipfile.ZipFile) -> dict:
    config = parse_json(read_member(archive, "config.json", MAX_CONFIG_BYTES), "config.json")
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError("config.json is not an rlweb checkpoint")
    version = config.get("format_version", 0)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint format {version!r} is not one this rlweb reads (up to {FORMAT_VERSION})")
    for name, kind in CONFIG_FIELDS.items():
        if not isinstance(config.get(name), kind):
            raise CheckpointError(f"config.json is missing or has a bad field: {name}")
    for name, kind in OPTIONAL_FIELDS.items():
        if name in config and (not isinstance(config[name], kind) or isinstance(config[name], bool)):
            raise CheckpointError(f"config.json has a bad field: {name}")
    for name in ("seed", "step"):
        if name in config and not 0 <= config[name] < 2**63:
            raise CheckpointError(f"config.json has a bad field: {name} must be from 0 to 2^63 - 1")
    return config


SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1}


def safetensors_header(data: bytes) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype, shape) from a safetensors file's JSON header, read before any tensor is made."""
    if len(data) < 8:
        raise CheckpointError("model.safetensors is corrupt: too short")
    length = int.from_bytes(data[:8], "little")
    if length > len(data) - 8:
        raise CheckpointError("model.safetensors is corrupt: its header is longer than the file")
    header = parse_json(data[8:8 + length], "model.safetensors' header")
    if not isinstance(header, dict):
        raise CheckpointError("model.safetensors is corrupt: its header is not a table of tensors")
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        if (dtype not in SAFETENSORS_DTYPES or not isinstance(shape, list)
                or not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape)):
            raise CheckpointError(f"model.safetensors is corrupt: bad entry for {name!r}")
        tensors[name] = (dtype, tuple(shape))
    return tensors


def check_shapes(header: dict[str, tuple[str, tuple[int, ...]]], expected: dict[str, tuple[int, ...]],
                 hyperparameters: dict) -> None:
    """Every network tensor the config's agent has is in the file with its shape, and nothing else is;
    optimizer state is no bigger than the networks. Checked on the header, before anything is allocated."""
    layers = {name: value for name, value in hyperparameters.items() if "hidden" in name or name == "lstm_size"}
    described = ", ".join(f"{name}={value!r}" for name, value in layers.items()) or "this config"
    modules = {name.split(".", 1)[0] for name in expected}
    largest = sum(math.prod(shape) for shape in expected.values())
    for name, (_, shape) in sorted(header.items(), key=lambda item: item[0].startswith("optimizer/")):
        if name.startswith("optimizer/"):
            if math.prod(shape) > largest:
                raise CheckpointError(f"model.safetensors holds optimizer state {name} of shape {list(shape)}, "
                                      "bigger than the networks it would belong to")
        elif name in expected:
            if shape != expected[name]:
                raise CheckpointError(f"the weights do not fit the network that {described} describes: {name} is "
                                      f"{list(shape)} in the file, the network needs {list(expected[name])}")
        elif name.split(".", 1)[0] in modules:
            raise CheckpointError(f"the weights do not fit the network that {described} describes: the file holds "
                                  f"{name}, which the network does not have")
        else:
            raise CheckpointError(f"model.safetensors holds {name}, which no part of a {described} agent has")
    missing = sorted(set(expected) - set(header))
    if missing:
        raise CheckpointError(f"the weights do not fit the network that {described} describes: the file lacks "
                              f"{', '.join(missing[:5])}")


def read_tensors(archive: zipfile.ZipFile, limit: int, expected: dict | None = None,
                 hyperparameters: dict | None = None) -> dict[str, torch.Tensor]:
    data = read_member(archive, "model.safetensors", limit)
    header = safetensors_header(data)
    if expected is not None:
        check_shapes(header, expected, hyperparameters or {})
    try:
        return load_tensors(data)
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise CheckpointError(f"model.safetensors is corrupt: {error}") from error


def model_bytes_limit(estimate) -> int:
    """The most bytes model.safetensors can need for this config: the networks and up to three optimizer
    slots per number (Adam's moments, AMSGrad's maximum), a header entry per tensor, some slack."""
    network = sum(math.prod(shape) * estimate.dtypes[name].itemsize for name, shape in estimate.shapes.items())
    return min(MAX_MODEL_BYTES, 4 * network + 1024 * 4 * len(estimate.shapes) + 2**20)


def flattened_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[int, dict],
                              groups: list[dict]) -> tuple[dict[int, dict], list[dict]]:
    """Saved optimizer state with one entry per parameter, fitted to an optimizer that now holds each
    group as one flat tensor (`trainer.cpu_speed.FlatParameters`; DQN's and SAC's checkpoints from before
    their parameters were flat hold one entry per parameter).

    The flat tensor is the group's parameters concatenated in order, so its moments are theirs
    concatenated the same way and its step count is theirs. State that already fits is returned as is.
    """
    if len(groups) != len(optimizer.param_groups) or all(
            len(saved["params"]) == len(group["params"]) for saved, group in zip(groups, optimizer.param_groups)):
        return state, groups
    fitted_state, fitted_groups, index = {}, [], 0
    for saved, group in zip(groups, optimizer.param_groups):
        if len(group["params"]) == 1 and len(saved["params"]) > 1:  # one entry per parameter -> one flat entry
            entries = [state[i] for i in saved["params"] if i in state]
            if len(entries) == len(saved["params"]):
                fitted_state[index] = {slot: torch.cat([entry[slot].reshape(-1) for entry in entries])
                                       if entries[0][slot].dim() > 0 else entries[0][slot] for slot in entries[0]}
            fitted_groups.append({**saved, "params": [index]})
            index += 1
            continue
        ids = []
        for i in saved["params"]:
            if i in state:
                fitted_state[index] = state[i]
            ids.append(index)
            index += 1
        fitted_groups.append({**saved, "params": ids})
    return fitted_state, fitted_groups


def load_checkpoint(path: str | Path, device: str = "auto", into=None):
    """An agent restored from `path`, ready to `predict`, `evaluate` or go on learning; with `into`, that agent (of
    the same algorithm: a run on several processes takes back the state its process 0 ended with) instead of a new one.

    Everything is checked before anything big is made: the config's fields, its env id (nothing is
    imported, `trainer.envs.check_env_id`), its hyperparameters, its memory estimate, then the weights'
    sizes and shapes against the network the config describes. Raises CheckpointError or ConfigError.
    """
    with open_archive(path) as archive:
        config = read_config(archive)
        if isinstance(config.get("plugin"), str):  # refused by name before anything of the plugin's is used
            problem = missing_plugin(config["algorithm"], config["plugin"], exact=False)
            if problem:
                raise CheckpointError(f"this checkpoint cannot be loaded: {problem}")
        spec = get_spec(config["algorithm"])
        check_env_id(config["env_id"])
        hyperparameters = spec.build_config(config["hyperparameters"])
        try:
            observation_space = space_from_json(config["observation_space"])
            action_space = space_from_json(config["action_space"])
        except (ValueError, TypeError, KeyError, OverflowError) as error:
            raise CheckpointError(f"config.json has a bad space: {error}") from None
        spec.check_spaces(observation_space, action_space)
        estimate = check_memory(spec, hyperparameters, observation_space, action_space, config["env_id"])
        tensors = read_tensors(archive, model_bytes_limit(estimate), estimate.shapes, config["hyperparameters"])
    if into is None:
        agent = spec.agent_class(config["env_id"], hyperparameters, seed=config.get("seed", 0), device=device,
                                 observation_space=observation_space, action_space=action_space)
        agent.name = spec.name
    elif into.name != spec.name:
        raise CheckpointError(f"a {spec.name} checkpoint cannot be loaded into a {into.name} agent")
    else:
        agent = into
        agent.config.__dict__.update(hyperparameters.__dict__)  # changed while it trained, by then
    for module_name, module in agent.modules.items():
        prefix = f"{module_name}."
        state = {key[len(prefix):]: value for key, value in tensors.items() if key.startswith(prefix)}
        try:
            module.load_state_dict(state, strict=True)
        except RuntimeError as error:
            raise CheckpointError(f"weights do not fit {module_name}: {error}") from error
    for optimizer_name, optimizer in agent.optimizers.items():
        groups = config.get("optimizers", {}).get(optimizer_name)
        if groups is None:
            continue  # saved without optimizer state: a fresh optimizer
        prefix = f"optimizer/{optimizer_name}/"
        state: dict[int, dict] = {}
        try:
            for key, value in tensors.items():
                if key.startswith(prefix):
                    index, slot = key[len(prefix):].split("/", 1)
                    state.setdefault(int(index), {})[slot] = value
            state, groups = flattened_optimizer_state(optimizer, state, groups)
            optimizer.load_state_dict({"state": state, "param_groups": groups})
        except (ValueError, KeyError, TypeError, IndexError, RuntimeError, AttributeError) as error:
            raise CheckpointError(f"optimizer state does not fit {optimizer_name}: {error}") from error
    agent.steps_done = max(0, config.get("step", 0))
    best = config.get("best_eval_return")
    agent.best_eval_return = float(best) if isinstance(best, (int, float)) else None
    agent.eval_due = config.get("eval_due") is True
    seconds = config.get("seconds_trained")  # missing from checkpoints written before they held the clock: 0
    agent.seconds_trained = float(seconds) if isinstance(seconds, (int, float)) and 0 <= seconds < math.inf else 0.0
    # what made the weights: kept by a run that goes on from them without recording its own (a run's other processes)
    environment = config.get("environment")
    agent.environment = environment if isinstance(environment, dict) else None
    try:
        agent.load_extra_state(config.get("extra_state") or {})
    except (ValueError, KeyError, TypeError, IndexError, RuntimeError, AttributeError) as error:
        raise CheckpointError(f"config.json has bad extra_state for {spec.name}: {error!r}") from error
    return agent
