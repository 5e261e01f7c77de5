"""`python -m benchmarks gpu`: on a machine without CUDA it says so and exits at once, having run nothing; its
summary reads as docs/benchmarks.md gives the figures."""

import importlib.metadata
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from packaging.utils import canonicalize_name

from benchmarks import _device_bundle, gpu

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_the_gpu_check_says_so_and_exits_non_zero_quickly(tmp_path):
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "benchmarks", "gpu", "--minutes", "9", "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == gpu.NO_CUDA_STATUS
    assert "no CUDA GPU here" in done.stderr and "needs one" in done.stderr
    assert not (tmp_path / "o").exists()  # nothing run, nothing written
    assert time.monotonic() - started < 60


def test_the_cuda_tests_it_runs_include_the_gpu_paths():
    files = gpu.cuda_test_files()
    assert "tests/trainer/test_cuda_graphs.py" in files and "tests/trainer/test_device_rollouts.py" in files


def test_every_algorithm_gets_a_small_env_its_spaces_allow():
    import trainer

    for name in trainer.algorithm_names():
        env_id = gpu.env_for(trainer.get_spec(name))
        assert env_id is not None, name
        trainer.validate(name, env_id, {})


def test_the_summary_reads_as_the_figures_for_the_docs():
    summary = {"device": "NVIDIA H100", "cpus": 16, "date": "2026-11-27 15:00 UTC",
               "tests": {"passed": True, "result": "25 passed", "seconds": 40.0},
               "algorithms": [{"algorithm": "ppo", "env_id": "CartPole-v1", "status": "ok", "steps_per_second": 900.0}],
               "speed": {"ppo": {"ratio": 3.1, "rlweb": [3100.0], "sb3": [1000.0], "pair_ratios": [3.1]}},
               "pong": {"env_steps": 2_000_000, "seconds": 420.0, "env_steps_per_second": 4761.9, "num_envs": 16,
                        "mean_return_last_20": 18.4, "reached_18": {"env_step": 1_900_000, "seconds": 400.0},
                        "eval": {"returns": [19.0, 20.0]}, "time_split": {"system/env_percent": 40.0}}}
    text = gpu.markdown(summary)
    assert "NVIDIA H100, 16 CPUs" in text and "| ppo | CartPole-v1 | ok | 900.0 |" in text
    assert "3.10x" in text and "reached +18 at 1,900,000 env steps, 6.7 minutes" in text


@pytest.mark.slow
def test_a_rehearsal_on_the_cpu_runs_the_parts_and_writes_the_figures_and_curve(tmp_path):
    """`--device cpu` runs the same code as on a GPU, so that a broken part is found here, not in a GPU's minutes."""
    out = tmp_path / "o"
    # the algorithms part is left out (each algorithm has its smoke tests in tests/trainer): CI's CPU is short
    done = subprocess.run([sys.executable, "-m", "benchmarks", "gpu", "--device", "cpu", "--minutes", "0.75",
                           "--out", str(out), "--skip", "tests", "speed", "algorithms",
                           "--pong-envs", "2", "--pong-eval-episodes", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "== PPO on Pong for the minutes left" in done.stdout, done.stdout[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert "algorithms" not in summary and "speed" not in summary and "tests" not in summary  # as skipped
    pong = summary["pong"]
    assert pong["env_steps"] > 0 and pong["episodes"] >= 0 and pong["num_envs"] == 2
    assert set(pong["time_split"]) == {"acting_percent", "env_percent", "update_percent", "other_percent"}
    assert (out / "pong-curve.csv").read_text().startswith("env_step,seconds,episode_return,mean_last_20\n")
    assert "A rehearsal on the CPU" in (out / "summary.md").read_text()
    assert summary["seconds"] < 0.75 * 60 + 60  # its minutes, and the figure drawn after them: not a 10M-step run


def test_without_its_packages_it_names_what_is_missing_at_once(tmp_path):
    """On a device machine without the carried wheels, it stops in seconds naming the missing packages."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "ale_py.py").write_text("raise ImportError('not on this machine')\n")
    done = subprocess.run([sys.executable, "-m", "benchmarks", "gpu", "--device", "cpu", "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(hide)})
    assert done.returncode == gpu.NOT_READY_STATUS
    assert "ale_py: ImportError: not on this machine" in done.stderr and "--bundle" in done.stderr
    assert not (tmp_path / "o").exists()


def wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    metadata = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
        name, version, "".join(f"Requires-Dist: {line}\n" for line in requires))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", metadata)
    return path


def test_the_bundle_check_finds_a_requirement_neither_carried_nor_on_the_device(tmp_path):
    carried = [wheel(tmp_path, "gymnasium", "1.4.0", ["numpy>=1.22", "farama-notifications>=0.0.1",
                                                      "typing-extensions>=4; python_version < '3.11'",
                                                      "pygame>=2; extra == 'classic-control'"]),
               wheel(tmp_path, "farama-notifications", "0.0.6", []),
               wheel(tmp_path, "stable-baselines3", "2.9.2", ["torch>=2.8", "shimmy>=2"])]
    assert _device_bundle.unmet(carried, "3.12") == {"stable-baselines3": ["shimmy>=2"]}
    assert _device_bundle.unmet(carried[:2], "3.12") == {}


def test_what_the_check_imports_is_on_the_device_image_or_carried():
    """Every package the check's modules load (trainer with each algorithm, the benchmarks it runs, stable-baselines3's
    Atari parts) is one the device image has or one the bundle carries: else the check would fail there."""
    sb3 = ", stable_baselines3, stable_baselines3.common.env_util, stable_baselines3.common.vec_env"
    code = (f"import sys, trainer, benchmarks.gpu, benchmarks.atari_speed{sb3}; "
            "from trainer.registry import get_spec, origin; [get_spec(n).agent_class for n in "
            "trainer.algorithm_names() if origin(n).builtin]; "
            "from trainer.envs import make_env; make_env('ALE/Pong-v5').close(); "
            "print(' '.join(sorted({name.split('.')[0] for name in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    distributions = importlib.metadata.packages_distributions()
    ours = {"trainer", "benchmarks", "rlweb", "tests", "__main__"}
    # tensorboard's file reader (through stable-baselines3's logger) takes boto3, for s3:// paths, where it can
    optional = {"boto3", "botocore", "jmespath", "s3transfer"}
    plugins = {canonicalize_name(entry_point.dist.name) for entry_point in
               importlib.metadata.entry_points(group="rlweb.algorithms") if entry_point.dist}  # a lab's, not the check's
    provided = _device_bundle.DEVICE_PACKAGES | {canonicalize_name(name) for name in _device_bundle.CARRIED}
    lacking = {}
    for module in done.stdout.split():
        if module in sys.stdlib_module_names or module in ours | optional or module not in distributions:
            continue
        names = {canonicalize_name(name) for name in distributions[module]}
        if not names & (provided | plugins):
            lacking[module] = sorted(names)
    assert lacking == {}, f"imported by the GPU check, neither on the device image nor carried: {lacking}"
    assert {"torch", "numpy", "gymnasium", "ale_py"} <= set(done.stdout.split())
