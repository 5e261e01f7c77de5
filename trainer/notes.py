"""What a run will do that its settings alone do not say, and settings that rarely fit together.

Nothing changes silently: `run_notes` lists, in words, each value the algorithm adjusts or schedules on
its own (a learning start raised to the batch size, a learning rate that decays to 0) and each
combination that is allowed but rarely what was meant (hidden layers behind the Nature CNN). The command
line prints them before training, the run's `started` event carries them (the run page's log shows
them), and the web form shows them when it launches.
"""

from __future__ import annotations

from trainer.envs import is_image_space
from trainer.params import parse_hidden_layers

RATES = ("learning_rate", "policy_learning_rate", "critic_learning_rate")


def run_notes(config, observation_space, total_steps: int | None = None) -> list[str]:
    """The notes for a run of `total_steps` (None: the ones that do not depend on its length)."""
    notes = []
    batch, starts = getattr(config, "batch_size", None), getattr(config, "learning_starts", None)
    if batch is not None and starts is not None and starts < batch:
        notes.append(f"learning_starts={starts} is below batch_size={batch}: learning starts once the replay holds "
                     f"{batch} transitions.")
    fraction = getattr(config, "exploration_fraction", None)
    if total_steps and fraction is not None and starts is not None and not getattr(config, "noisy", False):
        decayed, learning = int(fraction * total_steps), max(starts, batch or 0)
        if decayed <= learning < total_steps:
            notes.append(f"Epsilon reaches exploration_final_eps={config.exploration_final_eps} at step {decayed:,} "
                         f"(exploration_fraction={fraction} of {total_steps:,} steps), before learning starts at "
                         f"step {learning:,}: once it learns, the agent explores with that epsilon only. A larger "
                         f"exploration_fraction keeps epsilon decaying while it learns.")
    if getattr(config, "lr_schedule", "constant") == "linear":
        rates = ", ".join(f"{name}={getattr(config, name)}" for name in RATES if hasattr(config, name))
        notes.append(f"The learning rate decays linearly to 0 over the run from {rates} (lr_schedule=linear; "
                     f"lr_schedule=constant keeps it).")
    if getattr(config, "clip_schedule", "constant") == "linear":
        notes.append(f"clip_range decays linearly to 0 over the run from {config.clip_range} (clip_schedule=linear; "
                     f"clip_schedule=constant keeps it).")
    processes = getattr(config, "processes", 1)
    if processes > 1 and hasattr(config, "num_envs"):
        batch = f" and {config.batch_size // processes} of each minibatch of {config.batch_size}" \
            if hasattr(config, "batch_size") else ""
        notes.append(f"Trains on {processes} processes, each with {config.num_envs // processes} of the "
                     f"{config.num_envs} envs{batch}; they average their gradients at every update and hold the "
                     f"same weights (docs/distributed.md).")
    elif processes > 1:  # es
        notes.append(f"Trains on {processes} processes, which share the {config.num_agents // 2} pairs of candidates "
                     f"of each generation and take the same step from all their returns (docs/distributed.md).")
    layers = getattr(config, "hidden_layers", None)
    if layers is not None and is_image_space(observation_space) and parse_hidden_layers(layers):
        notes.append(f"hidden_layers={layers} adds layers behind the Nature CNN's 512 units; Atari agents usually "
                     f"have none (hidden_layers=none), or one for dueling heads.")
    return notes
