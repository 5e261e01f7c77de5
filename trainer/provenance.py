"""What made a run, recorded when it starts: the code (rlweb's version, and its git commit when it runs from a
checkout, flagged when the tree had uncommitted changes), the library versions, the machine, the seed, and the
exact `python -m trainer train ...` command that trains it again.

    agent.environment = collect(agent, total_steps=50_000, out="run-7", eval_interval=5_000)
    agent.environment["command"]  # python -m trainer train dqn CartPole-v1 --total-steps 50000 ... --set ...

The web app's worker records it as a run starts and stores it on the Run; `python -m trainer train` records it too.
A checkpoint's config.json holds the `agent.environment` it was saved with. The command names every hyperparameter
with `--preset none`, so it trains the same config even after a preset changes. Versions come from the installed
packages' metadata: nothing heavy is imported for them. Showing a record (`rows`, `value_text`) needs no PyTorch,
so the web server and beat do not import it for the pages; collecting one imports it, in the process that made the
agent and has it already.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import socket
import subprocess
from pathlib import Path

from trainer.registry import requirement
from trainer.version import __version__

GIT_SECONDS = 3.0  # each git call; a slow or hung git leaves the commit unknown, the run starts anyway
SOURCE_ROOT = Path(__file__).resolve().parent.parent  # the folder holding trainer/ and rlweb/ (a checkout, or
# site-packages for an installed wheel)
PACKAGES = {"gymnasium": "gymnasium", "ale_py": "ale-py", "mujoco": "mujoco", "numpy": "numpy"}

# every field of a record, in the order the pages show them, with its label
LABELS = {
    "rlweb_version": "rlweb", "rlweb_commit": "rlweb commit", "rlweb_dirty": "uncommitted changes",
    "python": "Python", "torch": "torch", "cuda": "CUDA", "cudnn": "cuDNN", "gymnasium": "Gymnasium",
    "ale_py": "ale-py", "mujoco": "MuJoCo", "numpy": "NumPy", "plugin": "plugin",
    "host": "host", "os": "OS", "cpu": "CPU", "cpu_count": "CPU cores", "gpu": "GPU",
    "device": "device", "threads": "torch threads", "seed": "seed", "start_step": "started at step",
    "command": "command",
}


def collect(agent, *, total_steps: int, out: str | Path, eval_interval: int = 0, eval_episodes: int = 5,
            checkpoint_interval: int = 0, video_interval: int = 0) -> dict:
    """The record of a run of `agent` to `total_steps` env steps, with the options `Agent.learn` takes, started now
    (at `agent.steps_done`). `out` is the folder its command writes to. Callers put it in `agent.environment`, which
    its checkpoints then hold."""
    import torch

    commit, dirty = source_commit(SOURCE_ROOT)
    device, threads = torch.device(agent.device), torch.get_num_threads()
    options = {"--eval-interval": eval_interval, "--eval-episodes": eval_episodes,
               "--checkpoint-interval": checkpoint_interval, "--video-interval": video_interval}
    return {
        "rlweb_version": package_version("rlweb") or __version__, "rlweb_commit": commit, "rlweb_dirty": dirty,
        "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": cudnn_version(),
        **{name: package_version(package) for name, package in PACKAGES.items()},
        "plugin": requirement(agent.name),
        "host": socket.gethostname(), "os": platform.platform(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "device": str(device), "threads": threads, "seed": agent.seed,
        "start_step": agent.steps_done,
        "command": repeat_command(agent, total_steps, options, out, device.type, threads),
    }


def repeat_command(agent, total_steps: int, options: dict, out: str | Path, device_type: str, threads: int) -> str:
    """`python -m trainer train ...` (trainer/cli.py) that trains `agent`'s config from scratch to `total_steps` with
    the CLI `options` ({"--eval-interval": 5000, ...}): every hyperparameter given with --set on top of no preset,
    the seed, the device type ("cpu", "cuda") and the torch threads of the process that records it."""
    words = ["python", "-m", "trainer", "train", agent.name, agent.env_id, "--total-steps", total_steps,
             "--seed", agent.seed, "--device", device_type]
    for flag, value in options.items():
        words += [flag, value]
    words += ["--threads", threads, "--preset", "none"]
    for name, value in agent.hyperparameters().items():
        words += ["--set", f"{name}={setting_text(value)}"]
    return shlex.join([str(word) for word in words + ["--out", out]])


def setting_text(value) -> str:
    """A hyperparameter as --set reads it back to the same value (trainer.params.Param.parse): floats exactly."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def source_commit(root: Path) -> tuple[str | None, bool | None]:
    """The commit checked out at `root` and whether tracked files there have uncommitted changes; (None, None) when
    `root` is not the top of a git checkout (an installed wheel, a folder inside another repository), git is missing,
    or it does not answer within GIT_SECONDS. Untracked files do not count as changes."""
    lines = git(root, "rev-parse", "--show-toplevel", "HEAD")
    if lines is None or len(lines) != 2 or Path(lines[0]).resolve() != Path(root).resolve():
        return None, None
    status = git(root, "status", "--porcelain", "--untracked-files=no")
    return lines[1], None if status is None else bool(status)


def git(root: Path, *arguments: str) -> list[str] | None:
    """The lines git prints, or None when it fails, is missing or is slow."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
    try:
        result = subprocess.run(["git", "-C", str(root), *arguments], capture_output=True, text=True,
                                timeout=GIT_SECONDS, env=environment, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.splitlines() if result.returncode == 0 else None


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def cudnn_version() -> str | None:
    """cuDNN's version as torch reports it (90100 for 9.1.0), None without one (a CPU build)."""
    import torch

    if not torch.backends.cudnn.is_available():
        return None
    version = torch.backends.cudnn.version()
    return str(version) if version else None


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), or what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def value_text(name: str, value) -> str:
    """A field's value as the pages show it."""
    if value is None:
        return "–"
    if name == "rlweb_dirty":
        return "yes" if value else "no"
    return str(value)


def rows(record: dict | None) -> list[tuple[str, str, str]]:
    """(field, label, value text) for each field of a record, known fields first in LABELS' order."""
    record = record or {}
    names = [name for name in LABELS if name in record] + [name for name in record if name not in LABELS]
    return [(name, LABELS.get(name, name), value_text(name, record[name])) for name in names]

