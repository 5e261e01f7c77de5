"""`python -m benchmarks gpu`: on a machine without CUDA it says so and exits at once, having run nothing; its
summary reads as docs/benchmarks.md gives the figures."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks import gpu

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
