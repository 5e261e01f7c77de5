"""System metrics: what a training process uses of its machine, sampled every few seconds while it trains.

The runner (trainer/runner.py) asks a `SystemSampler` for a sample when its `time` event is due and
`interval` seconds of wall clock have passed since the last one (every 5 s by default; the environment
variable `RLWEB_SYSTEM_METRICS_SECONDS` changes it, 0 turns sampling off), and once more when training ends
(in a `time` event of its own), so that every run that trained has one. A sample goes out in a `time` event, so
it takes the same path as every other metric (sink, Redis stream, Event rows, charts). Sampling in the training
loop needs no thread, no lock and no second writer to the sink; a sample takes about 0.05 ms of CPU (psutil
reads /proc), once per interval, and the time split about 0.5 us per env step (benchmarks/system_metrics.py).

Keys (all under `system/`):
- `system/cpu_percent`: this process's CPU use since the last sample (100 = one core busy);
- `system/rss_mb`: its resident memory;
- `system/machine_memory_percent`, `system/machine_memory_used_mb`: the machine's memory in use;
- `system/gpu<N>_utilization` (percent of time a kernel ran), `system/gpu<N>_memory_mb` and
  `system/gpu<N>_memory_percent` per NVIDIA GPU this process may use (N as torch numbers them, after
  CUDA_VISIBLE_DEVICES), read through NVIDIA's management library (nvidia-ml-py); nothing, and no error,
  where there is no GPU or no driver;
- `system/torch_allocated_mb`, `system/torch_reserved_mb`: torch's CUDA caching allocator on the run's
  device, when it trains on CUDA;
- `system/acting_percent`, `system/env_percent`, `system/update_percent`, `system/other_percent`: where
  the training loop's wall time went since the last sample (`PhaseTimes`).
"""

from __future__ import annotations

import os
import time

import psutil

INTERVAL_SECONDS = 5.0  # between samples, unless RLWEB_SYSTEM_METRICS_SECONDS says otherwise
INTERVAL_VARIABLE = "RLWEB_SYSTEM_METRICS_SECONDS"
MB = 2**20


def interval_seconds() -> float:
    """Seconds between samples: RLWEB_SYSTEM_METRICS_SECONDS, or INTERVAL_SECONDS; 0 turns sampling off."""
    text = os.environ.get(INTERVAL_VARIABLE, "").strip()
    if not text:
        return INTERVAL_SECONDS
    try:
        seconds = float(text)
    except ValueError as error:
        raise ValueError(f"{INTERVAL_VARIABLE} must be a number of seconds (0: off), not {text!r}") from error
    if not seconds >= 0:
        raise ValueError(f"{INTERVAL_VARIABLE} must be 0 (off) or more seconds, not {text!r}")
    return seconds


def gpu_handles() -> list:
    """NVML handles of the NVIDIA GPUs this process may use, in torch's order; [] without GPUs or a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
        handles = []
        for name in (part.strip() for part in visible.split(",")):
            if not name:
                break  # CUDA stops at the first empty or invalid entry
            if name.isdigit():
                if int(name) >= count:
                    break
                handles.append(pynvml.nvmlDeviceGetHandleByIndex(int(name)))
            else:
                handles.append(pynvml.nvmlDeviceGetHandleByUUID(name))
        return handles
    except Exception:  # no library, no driver, no device, or one the driver does not know: no GPU figures
        return []


def gpu_values(handles: list) -> dict[str, float]:
    """Utilisation and memory of each GPU; a figure the device does not give (a MIG slice's utilisation) is left out."""
    import pynvml

    values = {}
    for index, handle in enumerate(handles):
        try:
            values[f"system/gpu{index}_utilization"] = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except pynvml.NVMLError:
            pass
        try:
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            values[f"system/gpu{index}_memory_mb"] = round(memory.used / MB, 1)
            values[f"system/gpu{index}_memory_percent"] = round(100.0 * memory.used / max(memory.total, 1), 2)
        except pynvml.NVMLError:
            pass
    return values


class SystemSampler:
    """Samples this process's and its machine's CPU, memory and GPUs (`sample`), and, with `device` on CUDA, torch's
    allocator; `due(now)` says whether `interval` seconds have passed since the last sample."""

    def __init__(self, device=None, interval: float | None = None):
        self.interval = interval_seconds() if interval is None else float(interval)
        self.process = psutil.Process()
        self.process.cpu_percent(None)  # the first call starts the count: the first sample covers the interval
        self.gpus = gpu_handles()
        self.device = device if device is not None and getattr(device, "type", str(device)) == "cuda" else None
        self.next_at = time.monotonic() + self.interval

    def due(self, now: float) -> bool:
        return self.interval > 0 and now >= self.next_at

    def sample(self, now: float | None = None) -> dict[str, float]:
        self.next_at = (time.monotonic() if now is None else now) + self.interval
        machine = psutil.virtual_memory()
        values = {"system/cpu_percent": round(self.process.cpu_percent(None), 1),
                  "system/rss_mb": round(self.process.memory_info().rss / MB, 1),
                  "system/machine_memory_percent": round(machine.percent, 1),
                  "system/machine_memory_used_mb": round((machine.total - machine.available) / MB, 1)}
        if self.gpus:
            values.update(gpu_values(self.gpus))
        if self.device is not None:
            import torch

            values["system/torch_allocated_mb"] = round(torch.cuda.memory_allocated(self.device) / MB, 1)
            values["system/torch_reserved_mb"] = round(torch.cuda.memory_reserved(self.device) / MB, 1)
        return values


ACTING, ENV, UPDATE, OTHER = range(4)  # the phases of a training loop (PhaseTimes)
PHASE_NAMES = ("acting", "env", "update", "other")


class PhaseTimes:
    """Where a training loop's wall time goes, told apart by the calls the runner sees: an env step (`timed_step`,
    wrapped around the training envs' `step`) is ENV; from there to the runner's `advance` is ENV too (storing
    the transition, counting episodes); from `advance` or an update's metrics (`Runner.record`) to the next metrics
    is UPDATE; what comes before the next env step is ACTING; and the runner's own work inside `advance`
    (evaluations, checkpoints, videos, reporting) is OTHER. About 0.5 us per env step in all."""

    def __init__(self):
        self.seconds = [0.0] * len(PHASE_NAMES)
        self.mark = time.perf_counter()
        self.env_timed = False

    def lap(self, phase: int) -> None:
        """Count the time since the last mark as `phase`; the mark moves to now."""
        now = time.perf_counter()
        self.seconds[phase] += now - self.mark
        self.mark = now

    def timed_step(self, step):
        """`step` (a vector env's), counting the time before it as ACTING and its own as ENV."""
        self.env_timed = True
        lap = self.lap

        def timed(actions):
            lap(ACTING)
            try:
                return step(actions)
            finally:
                lap(ENV)

        return timed

    def percents(self) -> dict[str, float]:
        """Each phase's share of the time since the last call, in percent; {} when no env step was timed (a loop
        that steps its envs its own way)."""
        total = sum(self.seconds)
        shares = {f"system/{name}_percent": round(100.0 * seconds / total, 2)
                  for name, seconds in zip(PHASE_NAMES, self.seconds)} if self.env_timed and total > 0 else {}
        self.seconds = [0.0] * len(PHASE_NAMES)
        return shares
