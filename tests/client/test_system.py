"""The client's system metrics (rlweb_client/system.py): the process's CPU from os.times, its memory and the
machine's from psutil or, without it, Linux's /proc (the two agree), no GPU figures when the script does not use
CUDA, the interval's setting, and the samples a run sends on its own every `system_metrics` seconds."""

from __future__ import annotations

import time

import psutil
import pytest

from rlweb_client.system import SystemSampler, gpu_values, interval_seconds


def busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


def test_cpu_percent_is_the_cpu_time_the_process_took_over_the_wall_time_then_about_none_when_idle():
    sampler = SystemSampler()
    cpu, wall = time.process_time(), time.monotonic()
    busy(0.6)  # a core's share, however loaded the machine is
    took = 100 * (time.process_time() - cpu) / (time.monotonic() - wall)
    assert took > 5 and sampler.sample()["system/cpu_percent"] == pytest.approx(took, abs=5)
    time.sleep(0.6)
    assert sampler.sample()["system/cpu_percent"] < 30


def test_memory_from_proc_agrees_with_psutils():
    with_psutil = SystemSampler().memory()
    without = SystemSampler()
    without.psutil = None
    from_proc = without.memory()
    assert set(from_proc) == {"system/rss_mb", "system/machine_memory_percent", "system/machine_memory_used_mb"}
    assert from_proc["system/rss_mb"] == pytest.approx(with_psutil["system/rss_mb"], rel=0.05)
    assert from_proc["system/rss_mb"] == pytest.approx(psutil.Process().memory_info().rss / 2**20, rel=0.05)
    assert from_proc["system/machine_memory_used_mb"] == pytest.approx(with_psutil["system/machine_memory_used_mb"],
                                                                       rel=0.05)
    assert 0 < from_proc["system/machine_memory_percent"] < 100


def test_no_gpu_figures_without_cuda_in_use():
    import torch  # imported, as a training script has it, but CUDA never started

    assert not torch.cuda.is_initialized()
    assert gpu_values() == {}


def test_the_interval_comes_from_the_argument_then_the_environment_and_bad_ones_are_refused(monkeypatch):
    monkeypatch.delenv("RLWEB_SYSTEM_METRICS_SECONDS", raising=False)
    assert interval_seconds(None) == 10.0
    monkeypatch.setenv("RLWEB_SYSTEM_METRICS_SECONDS", "2.5")
    assert interval_seconds(None) == 2.5 and interval_seconds(0) == 0.0
    monkeypatch.setenv("RLWEB_SYSTEM_METRICS_SECONDS", "often")
    with pytest.raises(ValueError, match="RLWEB_SYSTEM_METRICS_SECONDS"):
        interval_seconds(None)
    with pytest.raises(ValueError, match="system_metrics"):
        interval_seconds(-1)


def test_a_run_sends_a_system_sample_every_interval_at_the_step_logged_last(server, start_run):
    run = start_run(system_metrics=0.2)
    run.log({"loss": 1.0}, step=100)
    busy(1.2)  # about 6 samples; at least 2 on a loaded machine
    run.finish()
    samples = [point for point in server.points() if "system/cpu_percent" in point["values"]]
    assert len(samples) >= 2
    assert all(point["step"] == 100 and point["values"]["system/rss_mb"] > 10 for point in samples)
    assert max(point["values"]["system/cpu_percent"] for point in samples) > 5  # busy, on a machine loaded or not
    seqs = [point["seq"] for point in server.points()]
    assert seqs == list(range(1, len(seqs) + 1))  # one numbering for the script's points and the samples


def test_no_samples_with_system_metrics_off(server, start_run):
    run = start_run(system_metrics=0)
    run.log({"loss": 1.0}, step=1)
    time.sleep(0.3)
    run.finish()
    assert [point["values"] for point in server.points()] == [{"loss": 1.0}]
