"""What a script's process uses of its machine, sampled by the client every few seconds (`init`'s `system_metrics`)
under the names a run trained on rlweb's workers reports (`system/...`), so a logged run's page draws the same
system charts. The process's CPU comes from `os.times`; its memory and the machine's from psutil when the script's
environment has it, else from Linux's /proc; the GPUs from torch, only when the script imported torch and uses
CUDA already (the client never starts CUDA itself): the current device's memory, its utilisation (which torch reads
through nvidia-ml-py, when installed), and torch's own allocator there."""

from __future__ import annotations

import os
import sys
import time
from typing import Optional

MB = 2**20
DEFAULT_SECONDS = 10.0
INTERVAL_VARIABLE = "RLWEB_SYSTEM_METRICS_SECONDS"  # as on the workers: seconds between samples, 0 for none


def interval_seconds(asked: Optional[float]) -> float:
    """`asked`, else $RLWEB_SYSTEM_METRICS_SECONDS, else 10; 0 for none. ValueError for anything else."""
    value = asked if asked is not None else os.environ.get(INTERVAL_VARIABLE, "").strip() or DEFAULT_SECONDS
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not seconds >= 0:
        raise ValueError(f"system_metrics (or {INTERVAL_VARIABLE}) is a number of seconds, 0 for none, not {value!r}")
    return seconds


class SystemSampler:
    def __init__(self):
        self.cpu_seconds, self.at = cpu_seconds(), time.monotonic()
        try:
            import psutil
        except ImportError:
            psutil = None
        self.psutil = psutil

    def sample(self) -> dict[str, float]:
        """The process's CPU use since the last sample (100: one core busy), its and the machine's memory, and the
        GPUs' figures (whatever of them this machine gives)."""
        used, now = cpu_seconds(), time.monotonic()
        values = {"system/cpu_percent": round(100.0 * (used - self.cpu_seconds) / max(now - self.at, 1e-6), 1)}
        self.cpu_seconds, self.at = used, now
        values.update(self.memory())
        values.update(gpu_values())
        return values

    def memory(self) -> dict[str, float]:
        if self.psutil is not None:
            machine = self.psutil.virtual_memory()
            rss, total, available = self.psutil.Process().memory_info().rss, machine.total, machine.available
        else:
            try:
                with open("/proc/self/statm") as statm:
                    rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
                with open("/proc/meminfo") as meminfo:
                    fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in meminfo}
                total, available = fields["MemTotal"], fields["MemAvailable"]
            except (OSError, ValueError, KeyError, IndexError):  # not Linux: the CPU alone
                return {}
        return {"system/rss_mb": round(rss / MB, 1),
                "system/machine_memory_percent": round(100.0 * (total - available) / max(total, 1), 1),
                "system/machine_memory_used_mb": round((total - available) / MB, 1)}


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def gpu_values() -> dict[str, float]:
    """The current CUDA device's memory in use and utilisation, and torch's allocator on it, when the script uses
    CUDA through torch; nothing otherwise (no GPU, no torch, or CUDA not started). Only the device the script
    works on: asking another would open a CUDA context there, taking its memory."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return {}
        index = torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(index)
        values = {f"system/gpu{index}_memory_mb": round((total - free) / MB, 1),
                  f"system/gpu{index}_memory_percent": round(100.0 * (total - free) / max(total, 1), 2)}
        try:
            values[f"system/gpu{index}_utilization"] = float(torch.cuda.utilization(index))
        except Exception:  # noqa: BLE001  (no nvidia-ml-py, or a MIG slice: no utilisation figure)
            pass
        values["system/torch_allocated_mb"] = round(torch.cuda.memory_allocated() / MB, 1)
        values["system/torch_reserved_mb"] = round(torch.cuda.memory_reserved() / MB, 1)
        return values
    except Exception:  # noqa: BLE001  (a driver error must not stop the script: no GPU figures this time)
        return {}
