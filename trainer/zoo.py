"""RL Baselines3 Zoo's tuned hyperparameters, carried over into our presets.

The zoo (https://github.com/DLR-RM/rl-baselines3-zoo, `rl_zoo3/hyperparams/*.yml`, MIT licence) tunes
stable-baselines3's algorithms per environment. `translate` maps one zoo entry to our hyperparameter
names and values, and says which zoo keys have no equivalent here and why. The entries themselves are
kept, translated, in `trainer/zoo_presets.py`, written by this module's command from the zoo's files:

    pip install pyyaml && pip download --no-deps rl_zoo3==2.9.2 && unzip rl_zoo3-*.whl
    python -m trainer.zoo rl_zoo3/hyperparams > /tmp/zoo_presets.py && mv /tmp/zoo_presets.py trainer/

Nothing here reads the zoo at run time, and nothing is evaluated: `policy_kwargs` and `normalize` are
strings of Python in the zoo's files, read here with `ast.literal_eval` on their parts.
"""

from __future__ import annotations

import ast
import pprint
import sys
from pathlib import Path

ZOO_VERSION = "2.9.2"

# zoo file -> our algorithms that take its entries
ALGORITHMS = {"dqn": ("dqn", "double-dqn"), "a2c": ("a2c",), "ppo": ("ppo",), "sac": ("sac",),
              "td3": ("td3",), "ddpg": ("ddpg",)}

# the zoo's MuJoCo ids are -v4 (and a few -v2); Gymnasium 1.4 has the same tasks as -v5
MUJOCO = ("Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedDoublePendulum",
          "InvertedPendulum", "Pusher", "Reacher", "Swimmer", "Walker2d")

NO_EQUIVALENT = {
    "policy": "the network is chosen from the observation space (an MLP, or the Nature CNN for images)",
    "env_wrapper": "Atari envs always get the standard preprocessing (AtariWrapper's); other wrappers have no "
                   "equivalent",
    "frame_stack": "Atari envs always stack 4 frames",
    "optimize_memory_usage": "Atari replay always stores each frame once",
    "use_sde": "no generalised state-dependent exploration here",
    "sde_sample_freq": "no generalised state-dependent exploration here",
    "use_expln": "no generalised state-dependent exploration here",
    "squash_output": "no generalised state-dependent exploration here",
    "full_std": "no generalised state-dependent exploration here",
    "callback": "no training callbacks",
    "replay_buffer_class": "replay buffers are chosen by the algorithm",
    "replay_buffer_kwargs": "replay buffers are chosen by the algorithm",
    "use_sde_at_warmup": "no generalised state-dependent exploration here",
}


class Unsupported(ValueError):
    """A zoo value this converter does not know how to carry over."""


def linear_schedule(value) -> tuple[float, bool]:
    """(start value, decays linearly): the zoo writes a linear decay to 0 as "lin_2.5e-4"."""
    if isinstance(value, str) and value.startswith("lin_"):
        return float(value[4:]), True
    return float(value), False


def call_keywords(text: str) -> dict:
    """`dict(a=1, b=[2, 3], c=nn.ReLU, d=dict(e=4))` as a dict, names as strings, without evaluating anything."""
    node = ast.parse(text.strip(), mode="eval").body

    def value(node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            return {keyword.arg: value(keyword.value) for keyword in node.keywords}
        if isinstance(node, ast.Attribute):
            return f"{value(node.value)}.{node.attr}"
        if isinstance(node, ast.Name):
            return node.id
        return ast.literal_eval(node)

    result = value(node)
    if not isinstance(result, dict):
        raise Unsupported(f"not a dict(...): {text!r}")
    return result


ACTIVATIONS = {"nn.ReLU": "relu", "nn.Tanh": "tanh", "th.nn.ReLU": "relu", "th.nn.Tanh": "tanh"}

# A zoo entry lists only what differs from stable-baselines3's defaults, and those differ from ours: so
# each entry is read on top of SB3 2.x's defaults (and the zoo's n_envs of 1), written in SB3's words.
SB3_DEFAULTS = {
    "dqn": dict(learning_rate=1e-4, buffer_size=1_000_000, learning_starts=100, batch_size=32, tau=1.0, gamma=0.99,
                train_freq=4, gradient_steps=1, target_update_interval=10_000, exploration_fraction=0.1,
                exploration_initial_eps=1.0, exploration_final_eps=0.05, max_grad_norm=10.0, n_envs=1,
                policy_kwargs=dict(net_arch=[64, 64])),
    "a2c": dict(learning_rate=7e-4, n_steps=5, gamma=0.99, gae_lambda=1.0, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
                use_rms_prop=True, normalize_advantage=False, n_envs=1, normalize=False,
                policy_kwargs=dict(net_arch=[64, 64], activation_fn="nn.Tanh", ortho_init=True, log_std_init=0.0,
                                   optimizer_kwargs=dict(alpha=0.99, eps=1e-5))),
    "ppo": dict(learning_rate=3e-4, n_steps=2048, batch_size=64, n_epochs=10, gamma=0.99, gae_lambda=0.95,
                clip_range=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, normalize_advantage=True, target_kl=0.0,
                n_envs=1, normalize=False,
                policy_kwargs=dict(net_arch=[64, 64], activation_fn="nn.Tanh", ortho_init=True, log_std_init=0.0,
                                   optimizer_kwargs=dict(eps=1e-5))),
    "sac": dict(learning_rate=3e-4, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005, gamma=0.99,
                train_freq=1, gradient_steps=1, ent_coef="auto", target_update_interval=1, n_envs=1, normalize=False,
                policy_kwargs=dict(net_arch=[256, 256])),
    "td3": dict(learning_rate=1e-3, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005, gamma=0.99,
                train_freq=1, gradient_steps=1, policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5,
                noise_std=0.0, n_envs=1, normalize=False, policy_kwargs=dict(net_arch=[400, 300])),
    "ddpg": dict(learning_rate=1e-3, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005,
                 gamma=0.99, train_freq=1, gradient_steps=1, noise_std=0.0, n_envs=1, normalize=False,
                 policy_kwargs=dict(net_arch=[400, 300])),
}
# the networks SB3's policies build: behind the Nature CNN no hidden layer, and separate actor and critic
CNN_NET_ARCH = []
SCHEDULED = ("ppo", "a2c", "ddpg", "td3")  # ours with an lr_schedule


def translate(zoo_algorithm: str, entry: dict) -> dict:
    """One zoo entry (on top of SB3's defaults) as {"values": our hyperparameters, "total_steps",
    "no_equivalent": {zoo key: why}}. SB3's names that are aliases of ours (trainer/params.py) are renamed."""
    defaults = SB3_DEFAULTS[zoo_algorithm]
    kwargs = {**defaults.get("policy_kwargs", {})}
    if entry.get("policy") == "CnnPolicy":
        kwargs["net_arch"] = CNN_NET_ARCH
    given = entry.get("policy_kwargs", {})
    kwargs.update(call_keywords(given) if isinstance(given, str) else dict(given))
    if "optimizer_kwargs" in defaults.get("policy_kwargs", {}) and "optimizer_kwargs" in kwargs:
        kwargs["optimizer_kwargs"] = {**defaults["policy_kwargs"]["optimizer_kwargs"], **kwargs["optimizer_kwargs"]}
    merged = {**defaults, **entry, "policy_kwargs": kwargs}
    several_rates = {"sac": ("policy_learning_rate", "critic_learning_rate", "alpha_learning_rate"),
                     "td3": ("policy_learning_rate", "critic_learning_rate"),
                     "ddpg": ("policy_learning_rate", "critic_learning_rate"),
                     "a2c": ("policy_learning_rate", "critic_learning_rate")}.get(zoo_algorithm, ("learning_rate",))
    values, no_equivalent = {}, {}
    for key, value in merged.items():
        if key == "n_timesteps":
            continue
        if key == "policy":  # MlpPolicy and CnnPolicy are what the observation space picks here
            if value not in ("MlpPolicy", "CnnPolicy"):
                no_equivalent[key] = f"{value}: {NO_EQUIVALENT[key]}"
        elif key in NO_EQUIVALENT:
            if value not in (False, None, 0):
                no_equivalent[key] = NO_EQUIVALENT[key]
        elif key == "learning_rate":
            rate, decays = linear_schedule(value)
            values.update({name: rate for name in several_rates})
            if zoo_algorithm in SCHEDULED:
                values["lr_schedule"] = "linear" if decays else "constant"
            elif decays:
                no_equivalent[key] = f"{value}: the rate decays to 0 there, and stays at its start value here"
        elif key == "clip_range":
            values["clip_range"], decays = linear_schedule(value)
            values["clip_schedule"] = "linear" if decays else "constant"
        elif key == "ent_coef" and zoo_algorithm == "sac":
            if isinstance(value, str) and value.startswith("auto"):
                values["auto_alpha"] = True
                values["alpha"] = float(value.split("_", 1)[1]) if "_" in value else 1.0
            else:
                values.update(auto_alpha=False, alpha=float(value))
        elif key == "train_freq":
            if isinstance(value, (list, tuple)):
                if value[1] != "step":
                    no_equivalent[key] = f"training every {value[0]} {value[1]}: here it is every N env steps"
                    continue
                value = value[0]
            values["train_frequency"] = int(value)
        elif key == "normalize":
            if isinstance(value, str):
                value = ast.literal_eval(value)
            if isinstance(value, dict):
                values["normalize_observations"] = bool(value.get("norm_obs", True))
                values["normalize_rewards"] = bool(value.get("norm_reward", True))
            else:
                values["normalize_observations"] = values["normalize_rewards"] = bool(value)
        elif key == "policy_kwargs":
            translate_policy_kwargs(zoo_algorithm, value, values, no_equivalent)
        elif key == "noise_type":
            values["noise_type"] = {"normal": "gaussian", "ornstein-uhlenbeck": "ornstein-uhlenbeck"}[value]
        elif key == "noise_std":
            values["action_noise"] = float(value)
        elif key == "use_rms_prop":
            values["optimizer"] = "rmsprop" if value else "adam"
        elif key == "gae_lambda" and zoo_algorithm == "a2c":
            if value != 1.0:
                no_equivalent[key] = "a2c here uses n-step returns (GAE with lambda 1)"
        elif key == "target_kl":
            values["target_kl"] = float(value or 0.0)  # 0: off, as SB3's None
        else:
            values[key] = value  # the same name, or a stable-baselines3 alias of ours (trainer/params.py)
    if values.get("gradient_steps") == -1:  # SB3: as many gradient steps as env steps in the phase
        values["gradient_steps"] = values.get("train_frequency", 1) * int(merged.get("n_envs", 1))
    if zoo_algorithm in ("ppo", "a2c"):
        values["shared_network"] = False  # SB3's MlpPolicy: separate actor and critic networks
    rollout = int(merged.get("n_steps", 0)) * int(merged.get("n_envs", 1))
    if zoo_algorithm == "ppo" and values.get("batch_size", 0) > rollout:
        no_equivalent["batch_size"] = (f"{values['batch_size']} is more than a rollout ({rollout}): one minibatch of "
                                       f"the whole rollout here")
        values["batch_size"] = rollout
    total_steps = int(float(entry["n_timesteps"])) if "n_timesteps" in entry else None
    return {"values": values, "total_steps": total_steps, "no_equivalent": no_equivalent}


def translate_policy_kwargs(zoo_algorithm: str, kwargs: dict, values: dict, no_equivalent: dict) -> None:
    for key, value in kwargs.items():
        if key == "net_arch":
            if isinstance(value, dict):
                sizes = list(value.values())
                if any(size != sizes[0] for size in sizes):
                    no_equivalent["policy_kwargs.net_arch"] = (f"different actor and critic sizes ({value}); here "
                                                               f"both take hidden_layers, set to the actor's")
                value = sizes[0]
            elif value and isinstance(value[0], dict):  # SB3's older [dict(pi=..., vf=...)]
                value = next(iter(value[0].values()))
            values["hidden_layers"] = ",".join(str(size) for size in value) or "none"
        elif key == "activation_fn":
            if value in ACTIVATIONS:
                values["activation"] = ACTIVATIONS[value]
            else:
                no_equivalent["policy_kwargs.activation_fn"] = f"{value}: the activations here are tanh and relu"
        elif key == "ortho_init":
            values["orthogonal_init"] = bool(value)
        elif key == "log_std_init" and zoo_algorithm in ("ppo", "a2c"):
            values["log_std_init"] = float(value)
        elif key == "optimizer_class" and value.endswith("RMSpropTFLike"):
            values["optimizer"] = "rmsprop_tf"
        elif key == "optimizer_kwargs":
            for name, setting in value.items():
                if name == "eps":
                    values["optimizer_epsilon"] = float(setting)
                elif name == "alpha":
                    values["rmsprop_alpha"] = float(setting)
                elif not (name == "weight_decay" and setting == 0):
                    no_equivalent[f"policy_kwargs.optimizer_kwargs.{name}"] = "no such optimizer setting here"
        elif key in NO_EQUIVALENT:
            no_equivalent[f"policy_kwargs.{key}"] = NO_EQUIVALENT[key]
        else:
            no_equivalent[f"policy_kwargs.{key}"] = "no equivalent network option here"


def our_env_id(zoo_env_id: str) -> str | None:
    """The zoo's id as ours (MuJoCo -v4/-v2 as -v5), or None for families not installed here (PyBullet,
    MiniGrid, robotics, donkey car), CarRacing, and the zoo's own keys (`default`, `atari`)."""
    name, _, version = zoo_env_id.rpartition("-")
    if name in MUJOCO:
        return f"{name}-v5"
    if "Bullet" in zoo_env_id or zoo_env_id.startswith(("MiniGrid", "Fetch", "donkey", "Neck")) or not name:
        return None
    if zoo_env_id.startswith("CarRacing"):  # tuned with image wrappers (grey, resized, skipped frames) not here
        return None
    return zoo_env_id


def read_zoo(folder: Path) -> dict:
    """{(our algorithm, env id or family): translated entry with its zoo source}."""
    import yaml  # only to write trainer/zoo_presets.py

    from trainer.params import canonical_names
    from trainer.registry import get_spec

    presets = {}
    for zoo_algorithm, ours in ALGORITHMS.items():
        entries = yaml.safe_load((folder / f"{zoo_algorithm}.yml").read_text())
        for zoo_env_id, entry in entries.items():
            target = "atari" if zoo_env_id == "atari" else our_env_id(zoo_env_id)
            if target is None or zoo_env_id == "default":
                continue
            translated = translate(zoo_algorithm, entry)
            source = f"RL Zoo {ZOO_VERSION}, hyperparams/{zoo_algorithm}.yml: {zoo_env_id}"
            for algorithm in ours:
                config_class = get_spec(algorithm).config_class
                values = canonical_names(config_class, translated["values"])  # in our names
                presets[(algorithm, target)] = {"source": source, **translated, "values": values}
    return presets


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else Path("rl_zoo3/hyperparams")
    presets = read_zoo(folder)
    print('"""RL Baselines3 Zoo\'s tuned settings in our names, written by `python -m trainer.zoo` (see '
          'trainer/zoo.py);\ndo not edit by hand."""\n')
    print(f"ZOO_PRESETS = {pprint.pformat(presets, width=116, sort_dicts=True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
