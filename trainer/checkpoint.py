"""Checkpoints: a zip of `config.json` and `model.safetensors`. Loading one never runs code (no pickle)."""

from __future__ import annotations

import json
import math
import os
import tempfile
import zipfile
from pathlib import Path

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from trainer.envs import space_from_json, space_to_json

FORMAT = "rlweb-checkpoint"
FORMAT_VERSION = 1
MAX_CONFIG_BYTES = 10 * 2**20
MAX_MODEL_BYTES = 4 * 2**30


class CheckpointError(ValueError):
    """The file is not a checkpoint this version can read."""


def save_checkpoint(agent, path: str | Path) -> Path:
    """Write `agent` to `path` atomically (a reader never sees half a file)."""
    from trainer import __version__

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
        "env_id": agent.env_id,
        "hyperparameters": agent.hyperparameters(),
        "seed": agent.seed,
        "step": agent.steps_done,
        "best_eval_return": agent.best_eval_return,  # a resumed run's best checkpoint must beat it
        "seconds_trained": agent.seconds_trained,  # a resumed run's clock goes on from here
        "observation_space": space_to_json(agent.observation_space),
        "action_space": space_to_json(agent.action_space),
        "extra_state": agent.extra_state(),
        "optimizers": optimizer_groups,
    }
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".checkpoint-", suffix=".zip")
    os.close(handle)
    try:
        with zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("config.json", json.dumps(config, indent=2))
            archive.writestr("model.safetensors", save_tensors(tensors))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def read_checkpoint(path: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """The config and tensors of a checkpoint file, checked for shape before anything is built."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(f"not a checkpoint zip: {error}") from error
    with archive:
        names = {info.filename: info for info in archive.infolist()}
        if "config.json" not in names or "model.safetensors" not in names:
            raise CheckpointError("a checkpoint zip holds config.json and model.safetensors")
        if names["config.json"].file_size > MAX_CONFIG_BYTES or names["model.safetensors"].file_size > MAX_MODEL_BYTES:
            raise CheckpointError("checkpoint is too large")
        try:
            config = json.loads(archive.read("config.json"))
        except ValueError as error:
            raise CheckpointError(f"config.json is not valid JSON: {error}") from error
        if not isinstance(config, dict) or config.get("format") != FORMAT:
            raise CheckpointError("config.json is not an rlweb checkpoint")
        if config.get("format_version", 0) > FORMAT_VERSION:
            raise CheckpointError(f"checkpoint format {config.get('format_version')} is newer than this rlweb")
        try:
            tensors = load_tensors(archive.read("model.safetensors"))
        except Exception as error:  # safetensors raises its own error types for corrupt headers
            raise CheckpointError(f"model.safetensors is corrupt: {error}") from error
    return config, tensors


def flattened_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[int, dict],
                              groups: list[dict]) -> tuple[dict[int, dict], list[dict]]:
    """Saved optimizer state with one entry per parameter, fitted to an optimizer that now holds each
    group as one flat tensor (`trainer.networks.FlatParameters`; DQN's and SAC's checkpoints from before
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


def load_checkpoint(path: str | Path, device: str = "auto"):
    """An agent restored from `path`, ready to `predict`, `evaluate` or go on learning."""
    from trainer.registry import get_spec

    config, tensors = read_checkpoint(path)
    spec = get_spec(str(config.get("algorithm")))
    try:
        agent = spec.agent_class(
            config["env_id"], spec.build_config(config.get("hyperparameters", {})), seed=int(config.get("seed", 0)),
            device=device, observation_space=space_from_json(config["observation_space"]),
            action_space=space_from_json(config["action_space"]))
    except (KeyError, TypeError) as error:
        raise CheckpointError(f"config.json is missing or has a bad field: {error}") from error
    agent.name = spec.name
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
        for key, value in tensors.items():
            if key.startswith(prefix):
                index, slot = key[len(prefix):].split("/", 1)
                state.setdefault(int(index), {})[slot] = value
        state, groups = flattened_optimizer_state(optimizer, state, groups)
        try:
            optimizer.load_state_dict({"state": state, "param_groups": groups})
        except (ValueError, KeyError) as error:
            raise CheckpointError(f"optimizer state does not fit {optimizer_name}: {error}") from error
    agent.steps_done = int(config.get("step", 0))
    best = config.get("best_eval_return")
    agent.best_eval_return = float(best) if isinstance(best, (int, float)) else None
    seconds = config.get("seconds_trained")  # missing from checkpoints written before they held the clock: 0
    agent.seconds_trained = float(seconds) if isinstance(seconds, (int, float)) and 0 <= seconds < math.inf else 0.0
    agent.load_extra_state(config.get("extra_state") or {})
    return agent
