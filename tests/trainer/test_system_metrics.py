"""trainer.system_metrics: the CPU, memory and GPU samples a run sends with its `time` events, and the time split
between acting, env steps and updates. Real psutil, real /proc; GPU figures only where the machine has a GPU."""

import time

import psutil
import pytest
import torch

import trainer
from trainer import runner as runner_module
from trainer import system_metrics
from trainer.events import ListSink
from trainer.system_metrics import PhaseTimes, SystemSampler, interval_seconds

PHASES = ("system/acting_percent", "system/env_percent", "system/update_percent", "system/other_percent")


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_sample_has_the_process_and_machine_figures_with_sane_values():
    wall, cpu = time.monotonic(), time.process_time()
    sampler = SystemSampler(interval=5)
    held = bytearray(64 * 2**20)  # 64 MB the process holds and touches: the resident memory includes it
    held[::4096] = b"x" * len(held[::4096])
    busy(0.3)
    values = sampler.sample()
    assert {"system/cpu_percent", "system/rss_mb", "system/machine_memory_percent",
            "system/machine_memory_used_mb"} <= set(values)
    assert all(key.startswith("system/") and isinstance(value, float) for key, value in values.items())
    # the CPU time this process used while it span, per wall second (a busy machine gives it less than a core)
    used = 100 * (time.process_time() - cpu) / (time.monotonic() - wall)
    assert 0 < values["system/cpu_percent"] <= 100 * psutil.cpu_count()
    assert values["system/cpu_percent"] == pytest.approx(used, abs=15)
    assert values["system/rss_mb"] >= 64
    assert abs(values["system/rss_mb"] - psutil.Process().memory_info().rss / 2**20) < 32
    assert 0 < values["system/machine_memory_percent"] < 100
    assert 0 < values["system/machine_memory_used_mb"] < psutil.virtual_memory().total / 2**20
    del held


def test_gpu_figures_come_per_device_where_there_are_gpus_and_silently_not_elsewhere():
    values = SystemSampler(interval=5).sample()
    gpu_keys = sorted(key for key in values if key.startswith("system/gpu"))
    if not torch.cuda.is_available():
        assert gpu_keys == [] and "system/torch_allocated_mb" not in values
        return
    for index in range(torch.cuda.device_count()):
        assert 0 <= values[f"system/gpu{index}_utilization"] <= 100
        assert values[f"system/gpu{index}_memory_mb"] > 0
        assert 0 < values[f"system/gpu{index}_memory_percent"] <= 100


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's CUDA allocator needs a GPU")
def test_torch_allocator_figures_come_on_a_cuda_device():
    tensor = torch.zeros(32 * 2**20 // 4, device="cuda")  # 32 MB
    values = SystemSampler(torch.device("cuda", 0), interval=5).sample()
    assert values["system/torch_allocated_mb"] >= 32
    assert values["system/torch_reserved_mb"] >= values["system/torch_allocated_mb"]
    del tensor


def test_a_machine_without_an_nvidia_driver_gives_no_gpus_and_no_error(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert system_metrics.gpu_handles() == []


def test_the_interval_comes_from_the_environment_and_is_checked(monkeypatch):
    monkeypatch.delenv(system_metrics.INTERVAL_VARIABLE, raising=False)
    assert interval_seconds() == system_metrics.INTERVAL_SECONDS
    monkeypatch.setenv(system_metrics.INTERVAL_VARIABLE, "0")
    assert interval_seconds() == 0
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(system_metrics.INTERVAL_VARIABLE, bad)
        with pytest.raises(ValueError, match="RLWEB_SYSTEM_METRICS_SECONDS"):
            interval_seconds()


def test_a_sampler_is_due_once_its_interval_has_passed():
    sampler = SystemSampler(interval=5)
    now = time.monotonic()
    assert not sampler.due(now)
    assert sampler.due(now + 5.1)
    sampler.sample(now + 5.1)
    assert not sampler.due(now + 6) and sampler.due(now + 10.2)
    assert not SystemSampler(interval=0).due(now + 1e9)


def test_phase_times_split_the_loop_by_the_calls_the_runner_sees():
    phases = PhaseTimes()
    step = phases.timed_step(lambda actions: time.sleep(0.1))
    for _ in range(3):
        time.sleep(0.01)  # acting
        step(None)  # env
        phases.lap(system_metrics.ENV)
        time.sleep(0.002)  # the runner's own work
        phases.lap(system_metrics.OTHER)
        time.sleep(0.04)  # an update
        phases.lap(system_metrics.UPDATE)
    shares = phases.percents()
    assert sum(shares.values()) == pytest.approx(100, abs=0.1)
    assert shares["system/env_percent"] > shares["system/update_percent"] > shares["system/acting_percent"]
    assert shares["system/other_percent"] > 0
    assert shares["system/env_percent"] == pytest.approx(100 * 0.1 / 0.152, abs=12)
    assert PhaseTimes().percents() == {}  # no env step timed: no split rather than a wrong one


def test_a_dqn_run_sends_system_figures_with_its_time_events(monkeypatch):
    monkeypatch.setenv(system_metrics.INTERVAL_VARIABLE, "0.005")  # 1,500 steps took under 0.2 s in a CI
    monkeypatch.setattr(runner_module, "TIME_EVENT_SECONDS", 0.002)
    sink = ListSink()
    agent = trainer.make("dqn", "CartPole-v1", seed=0, learning_starts=100, batch_size=16, hidden_layers="16")
    started = time.monotonic()
    agent.learn(1500, sink=sink, eval_episodes=0)
    took = time.monotonic() - started
    samples = [event["values"] for event in sink.of_kind("time") if "system/rss_mb" in event["values"]]
    assert len(samples) >= 2, f"a run of {took:.3f} s samples every 0.005 s"
    for values in samples:
        assert values["system/rss_mb"] > 50 and values["system/cpu_percent"] >= 0
        assert sum(values[key] for key in PHASES) == pytest.approx(100, abs=0.1)
    # once learning has started, updates take time, and so do the env steps
    assert max(values["system/update_percent"] for values in samples) > 5
    assert max(values["system/env_percent"] for values in samples) > 1


def test_a_run_shorter_than_the_interval_still_sends_one_sample_when_training_ends(monkeypatch):
    monkeypatch.delenv(system_metrics.INTERVAL_VARIABLE, raising=False)  # every 5 s
    sink = ListSink()
    trainer.make("dqn", "CartPole-v1", seed=0, learning_starts=100, batch_size=16, hidden_layers="16").learn(
        300, sink=sink, eval_episodes=0)
    samples = [event for event in sink.events if "system/rss_mb" in event["values"]]
    assert len(samples) == 1 and samples[0]["kind"] == "time" and samples[0]["step"] == 300
    assert sink.events.index(samples[0]) < sink.events.index(sink.of_kind("finished")[0])
    assert sum(samples[0]["values"][key] for key in PHASES) == pytest.approx(100, abs=0.1)


def test_sampling_turned_off_sends_no_system_figures(monkeypatch):
    monkeypatch.setenv(system_metrics.INTERVAL_VARIABLE, "0")
    monkeypatch.setattr(runner_module, "TIME_EVENT_SECONDS", 0.05)
    sink = ListSink()
    trainer.make("dqn", "CartPole-v1", seed=0, learning_starts=100, batch_size=16, hidden_layers="16").learn(
        600, sink=sink, eval_episodes=0)
    assert sink.of_kind("time")
    assert not any(key.startswith("system/") for event in sink.events for key in event["values"])
