"""One run on several processes: data-parallel learners with torch.distributed (docs/distributed.md).

    agent = trainer.make("ppo", "LunarLander-v3", processes=2)
    agent.learn(1_000_000)  # two processes, launched with PyTorch's elastic launcher (torchrun's API)

A run with `processes=N` (a2c, ppo, rnd-ppo, reinforce, vpg and es) trains on N processes, each with its share of
the envs (`num_envs / N`, seeded apart: `Group.seed_offset`) and of every batch, each on its own GPU when the host
has one per process (NCCL), else on the CPU or sharing a GPU (gloo). They stay one learner:

- After every backward pass each process averages its gradients with the others' (`Group.average_gradients`: one
  all-reduce of the flat gradient), and the statistics an update takes of its batch (advantage normalisation,
  PPO's KL) are taken over every process's part of it. The update is the one a single process would make on the
  whole batch, and every process holds the same weights (checked at the end: `weights_identical`).
- Normalisation statistics (observations, rewards, RND's) are merged at every update (`Group.merge_statistics`).
- Process 0 reports. It alone evaluates, writes checkpoints and videos; its events go to a file in the run's folder,
  which the launching process reads and hands to the caller's sink (Redis in the web app). The other processes'
  episodes reach it about once a second, and the step count is every process's steps.
- The launching process asks its sink whether to stop and for hyperparameter changes, as the runner of a one-process
  run does, and passes them on (a `stop` file, changes.jsonl). The processes agree on both together
  (`DistributedRunner`), so they stop, or change a learning rate, at the same point: a cancel ends them all within a
  second.

`learn` saves the agent as it is (fresh, or resumed from a checkpoint) to a start checkpoint that every process
loads, so all start from the same weights, statistics and step count; process 0 hands its final state back. One
process that fails ends the run: the launcher stops the others, and `learn` raises TrainingError saying which
process and why. Processes die with the process that launched them (Linux's parent-death signal).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from trainer.events import Sink
from trainer.runner import Runner, TrainingError

SEED_STRIDE = 2**40  # process r seeds its envs and random numbers with seed + r * SEED_STRIDE: apart from every other
AGREE_SECONDS = 0.1  # how often the processes agree on stopping (process 0 times the agreements)
MOST_CALLS_BETWEEN_AGREEMENTS = 10_000
GATHER_SECONDS = 1.0  # how often the other processes' episodes are sent to process 0
RELAY_SECONDS = 0.05  # how often the launching process reads process 0's events
RELAY_POLL_SECONDS = 0.25  # how often it asks its sink whether to stop, and for changes
SHUTDOWN_SECONDS = 30  # how long the launching process waits for the processes to stop when it must give up

EVENTS_FILE = "events.jsonl"  # process 0 -> the launching process
CHANGES_FILE = "changes.jsonl"  # the launching process -> process 0
STOP_FILE = "stop"  # the launching process -> every process on its host
START_FILE = "start.zip"
END_FILE = "end.zip"


# --- where a process stands in its run ------------------------------------------------------------------------

class Group:
    """Where this process stands in its run: process 0 of 1, unless the run trains on several (`ProcessGroup`).

    Algorithms call these methods where the processes' data meet; in one process each is the plain local computation.
    """

    rank = 0
    size = 1
    seed_offset = 0

    def average_gradients(self, parameters, weight: float | None = None) -> None:
        """Make each parameter's gradient the mean of every process's (weighted by `weight`, the number of samples
        this process's loss averaged over, where the processes' batches differ in size)."""

    def average(self, value: torch.Tensor) -> torch.Tensor:
        """A scalar's mean over the processes."""
        return value

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The mean of every process's `values` together."""
        return values.mean()

    def normalized(self, values: torch.Tensor) -> torch.Tensor:
        """(values - mean) / (std + 1e-8), the mean and std of every process's values together; a batch of one is left
        alone."""
        if len(values) <= 1:
            return values
        return (values - values.mean()) / (values.std() + 1e-8)

    def counts(self, count: int) -> list[int]:
        """Every process's `count`, in process order."""
        return [count]

    def interleaved(self, rows: list) -> list:
        """Rows split between the processes as `rows[rank::size]` (each process's own), put back in order on every
        process."""
        return rows


_CURRENT: Group = Group()


def current_group() -> Group:
    """This process's place in its run (an agent takes it when it is made)."""
    return _CURRENT


def use_group(group: Group) -> None:
    global _CURRENT
    _CURRENT = group


class ProcessGroup(Group):
    """A process of a run on several, after `torch.distributed.init_process_group`. Tensors meet where the backend
    takes them (NCCL: on this process's GPU; gloo: on the CPU); agreements and Python objects go through gloo on the
    CPU whatever the backend."""

    def __init__(self, device: torch.device, backend: str):
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.seed_offset = self.rank * SEED_STRIDE
        self.device = device
        self.tensor_device = device if backend == "nccl" else torch.device("cpu")
        self.control = dist.new_group(backend="gloo") if backend == "nccl" else None  # None: the default group

    def _all_reduce(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        """`tensor` reduced over the processes (in place where it already lives where they meet)."""
        moved = tensor.to(self.tensor_device)
        dist.all_reduce(moved, op=op)
        return moved.to(tensor.device)

    def average_gradients(self, parameters, weight: float | None = None) -> None:
        grads = [p.grad for p in parameters if p.grad is not None]
        if weight is None and len(grads) == 1 and grads[0].device == self.tensor_device:
            dist.all_reduce(grads[0])  # the common case: one flat gradient (FlatParameters), summed in place
            grads[0].div_(self.size)
            return
        pieces = [grad.reshape(-1) for grad in grads]
        if weight is not None:  # sum of weight x gradient, and of the weights, in one all-reduce
            pieces = [piece * weight for piece in pieces] + [pieces[0].new_tensor([float(weight)])]
        total = self._all_reduce(torch.cat(pieces))
        divisor = total[-1] if weight is not None else self.size
        offset = 0
        for grad in grads:
            grad.copy_(total[offset:offset + grad.numel()].view_as(grad) / divisor)
            offset += grad.numel()

    def average(self, value: torch.Tensor) -> torch.Tensor:
        total = self._all_reduce(value.detach().reshape(1).double())
        return (total / self.size).reshape(value.shape).to(value.dtype)

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        values64 = values.double()
        total, count = self._all_reduce(torch.stack([values64.sum(), values64.new_tensor(float(values.numel()))]))
        return (total / count).to(values.dtype)

    def normalized(self, values: torch.Tensor) -> torch.Tensor:
        values64 = values.double()
        count, total, squares = self._all_reduce(torch.stack(
            [values64.new_tensor(float(values.numel())), values64.sum(), (values64 * values64).sum()]))
        if float(count) <= 1:
            return values
        mean = total / count
        std = ((squares - count * mean * mean) / (count - 1)).clamp(min=0).sqrt()  # Bessel's, as torch.std
        return (values - mean.to(values.dtype)) / (std.to(values.dtype) + 1e-8)

    def minibatch_statistics(self, values: torch.Tensor, batch_size: int) -> list[tuple]:
        """(mean, std, size) of each run minibatch, whose part on this process is each `batch_size` slice of `values`
        in turn (`RolloutBuffer.epochs`): one all-reduce for all of them."""
        values64 = values.double()
        number = torch.arange(len(values), device=values.device) // batch_size
        minibatches = (len(values) + batch_size - 1) // batch_size
        sums = values64.new_zeros(3, minibatches)
        sums[0].index_add_(0, number, torch.ones_like(values64))
        sums[1].index_add_(0, number, values64)
        sums[2].index_add_(0, number, values64 * values64)
        count, total, squares = self._all_reduce(sums)
        mean = total / count
        std = ((squares - count * mean * mean) / (count - 1).clamp(min=1)).clamp(min=0).sqrt()
        sizes = count.tolist()
        mean, std = mean.to(values.dtype), std.to(values.dtype)
        return [(mean[k], std[k], int(sizes[k])) for k in range(minibatches)]

    def counts(self, count: int) -> list[int]:
        gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        dist.all_gather(gathered, torch.tensor([count], dtype=torch.int64), group=self.control)
        return [int(part) for part in gathered]

    def interleaved(self, rows: list) -> list:
        parts: list = [None] * self.size
        dist.all_gather_object(parts, rows, group=self.control)
        ordered: list = [None] * sum(len(part) for part in parts)
        for rank, part in enumerate(parts):
            ordered[rank::self.size] = part
        return ordered

    # --- what the runner and the launch use -----------------------------------------------------------------
    def agree(self, values: list[float]) -> list[float]:
        """The largest of every process's `values`, position by position."""
        flags = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.control)
        return flags.tolist()

    def broadcast_object(self, value):
        """Process 0's `value`, on every process."""
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def gather_objects(self, value) -> list | None:
        """Every process's `value` in process order, on process 0 (None on the others)."""
        gathered = [None] * self.size if self.rank == 0 else None
        dist.gather_object(value, gathered, dst=0, group=self.control)
        return gathered

    def broadcast_modules(self, modules) -> None:
        """Give every process process 0's weights (and buffers)."""
        for module in modules:
            for tensor in module.state_dict().values():
                moved = tensor.to(self.tensor_device)
                dist.broadcast(moved, src=0)
                if moved is not tensor:
                    tensor.copy_(moved)

    def same_everywhere(self, modules) -> bool:
        """Whether every process holds exactly the same weights (and buffers)."""
        tensors = [tensor.detach().reshape(-1).double()
                   for module in modules for tensor in module.state_dict().values()]
        if not tensors:
            return True
        flat = torch.cat(tensors)
        return bool(torch.equal(self._all_reduce(flat.clone(), dist.ReduceOp.MAX),
                                self._all_reduce(flat.clone(), dist.ReduceOp.MIN)))

    def merge_statistics(self, statistics: list, bases: list[tuple]) -> None:
        """Merge the samples each RunningMeanStd in `statistics` took since `bases` (its count, mean and variance
        when the processes last merged, the same on all) with the other processes' samples since then.

        Sums of the samples' deviations from the base mean, which every process shares, are exact to add up:
        k = n - n0, S = n (mean - m0), Q = n (var + (mean - m0)^2) - n0 v0 over this process's new samples; then
        N = n0 + sum k, mean = m0 + sum S / N, var = (n0 v0 + sum Q) / N - (sum S / N)^2.
        """
        parts = []
        for stats, (count0, mean0, var0) in zip(statistics, bases):
            shift = stats.mean - mean0
            parts += [np.atleast_1d(stats.count - count0), np.ravel(stats.count * shift),
                      np.ravel(stats.count * (stats.var + shift**2) - count0 * var0)]
        total = torch.from_numpy(np.concatenate(parts).astype(np.float64))
        dist.all_reduce(total, group=self.control)
        total = total.numpy()
        offset = 0
        for stats, (count0, mean0, var0) in zip(statistics, bases):
            size = mean0.size
            new, shift_sum, squares = total[offset], total[offset + 1:offset + 1 + size], \
                total[offset + 1 + size:offset + 1 + 2 * size]
            offset += 1 + 2 * size
            count = count0 + new
            shift = shift_sum.reshape(mean0.shape) / count
            stats.mean = mean0 + shift
            stats.var = np.maximum((count0 * var0 + squares.reshape(mean0.shape)) / count - shift**2, 0.0)
            stats.count = float(count)


def snapshot(stats) -> tuple:
    return stats.count, np.array(stats.mean, dtype=np.float64), np.array(stats.var, dtype=np.float64)


# --- the runner of each process -------------------------------------------------------------------------------

class DistributedRunner(Runner):
    """The runner of one process of a run on several (see above). Every process runs it; only process 0's sink
    reports, and only process 0 evaluates, checkpoints and records videos.

    The training loops call `should_stop` equally often on every process (once per vector step, once per minibatch or
    value step), and every AGREE_SECONDS or so (process 0 counts the calls that take) all the processes agree at the
    same call: whether to stop (any process was asked to), the hyperparameter changes process 0 took from its sink,
    whether the other processes send their episodes now. Everything else that meets (gradients, statistics) meets
    at points the algorithms reach together.
    """

    def __init__(self, agent, group: ProcessGroup, **options):
        self.group = group
        self._outbox: list[dict] = []  # process 0: changes taken from its sink, for every process at the next agreement
        self._calls_left = 1  # should_stop calls before the next agreement (the first one agrees)
        self._calls = 0  # since the last agreement
        self._episodes: list[tuple] = []  # this process's finished episodes that process 0 has not had yet
        self.weights_identical: bool | None = None
        super().__init__(agent, **options)
        self._bases = [snapshot(stats) for stats in agent.running_statistics()]
        self._agreed_at = self._gathered_at = time.monotonic()

    @property
    def main(self) -> bool:
        return self.group.rank == 0

    # --- what process 0 alone does ------------------------------------------------------------------------
    def episode(self, episode_return: float, length: int, **values) -> None:
        if self.main:
            super().episode(episode_return, length, **values)
        else:
            self._episodes.append((float(episode_return), int(length), values))

    def _evaluate(self) -> None:
        if self.main:
            super()._evaluate()

    def _record_video(self) -> None:
        if self.main:
            super()._record_video()

    def _checkpoint(self, filename: str, tag: str, required: bool = False):
        return super()._checkpoint(filename, tag, required) if self.main else None

    def _take_changes(self) -> None:
        if self.main:  # applied on every process at the next agreement
            self._outbox += self.sink.changes()

    def _extras(self, kind: str) -> dict:
        extras = {"processes": self.group.size}
        if kind == "finished" and self.weights_identical is not None:
            extras["weights_identical"] = self.weights_identical
        return extras

    # --- what every process does together -----------------------------------------------------------------------
    def should_stop(self) -> bool:
        if self.stopped:
            return True
        self._calls += 1
        self._calls_left -= 1
        if self._calls_left > 0:
            return False
        return self._agree(self.stop_asked())

    def stop_agreed(self, stopping: bool) -> bool:
        return self._agree(stopping or self.stop_asked())

    def _start_training(self) -> bool:
        stopping = self.sink.should_stop()
        if not stopping:
            self._take_changes()
        return not self._agree(stopping)

    def record(self, values: dict) -> None:
        """Training metrics, as a single process's; and, once per update, the normalisation statistics merged."""
        super().record(values)
        statistics = self.agent.running_statistics()
        if statistics:
            self.group.merge_statistics(statistics, self._bases)
            self._bases = [snapshot(stats) for stats in statistics]

    def _training_ended(self) -> None:
        self._gather_episodes()
        self.weights_identical = self.group.same_everywhere(self.agent.modules.values())

    def _agree(self, stopping: bool) -> bool:
        now = time.monotonic()
        calls = gather = 0.0
        if self.main:  # the next agreement AGREE_SECONDS from now, at the pace of the calls since the last one
            rate = self._calls / max(now - self._agreed_at, 1e-3)
            calls = float(min(MOST_CALLS_BETWEEN_AGREEMENTS, max(1, int(rate * AGREE_SECONDS))))
            gather = float(now - self._gathered_at >= GATHER_SECONDS)
        stop, changes, calls, gather = self.group.agree([float(stopping), float(bool(self._outbox)), calls, gather])
        self._calls, self._calls_left, self._agreed_at = 0, int(calls), now
        if changes:
            self._changes += self.group.broadcast_object(self._outbox)
            self._outbox = []
            self._apply_due_changes()
        if gather:
            self._gather_episodes()
        self.stopped = self.stopped or bool(stop)
        return self.stopped

    def _gather_episodes(self) -> None:
        gathered = self.group.gather_objects(self._episodes)
        self._episodes, self._gathered_at = [], time.monotonic()
        for episodes in (gathered or [])[1:]:
            for episode_return, length, values in episodes:
                super().episode(episode_return, length, **values)


# --- the sink of each process, and the launching process's side -------------------------------------------------

class JsonLines:
    """The complete lines appended to a JSON-lines file since the last `read` (a line that a process which died was
    writing is never read)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.rest = b""

    def read(self) -> list:
        try:
            with self.path.open("rb") as file:
                file.seek(self.offset)
                data = file.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *lines, self.rest = (self.rest + data).split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def append_lines(path: Path, values: list) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write("".join(json.dumps(value, default=plain) + "\n" for value in values))


def plain(value):
    """NumPy numbers as Python numbers, for JSON."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class ProcessSink(Sink):
    """The sink of a process of a run on several: process 0 appends its events to the run folder's events.jsonl and
    reads the hyperparameter changes the launching process appends to changes.jsonl; every process stops when the
    launching process puts a `stop` file there."""

    def __init__(self, folder: Path, main: bool):
        self.stop_file = folder / STOP_FILE
        self.events = (folder / EVENTS_FILE).open("a", encoding="utf-8") if main else None
        self.requests = JsonLines(folder / CHANGES_FILE) if main else None

    def emit(self, event: dict) -> None:
        if self.events is not None:
            self.events.write(json.dumps(event, default=plain) + "\n")
            self.events.flush()

    def should_stop(self) -> bool:
        return self.stop_file.exists()

    def changes(self) -> list[dict]:
        return self.requests.read() if self.requests is not None else []

    def close(self) -> None:
        if self.events is not None:
            self.events.close()


@dataclass(frozen=True)
class Hosts:
    """Several hosts for one run (docs/distributed.md): the same command on each of `nodes` hosts, which meet at
    `endpoint` (host:port, on one of them) under `run_id`. One host by default."""

    nodes: int = 1
    endpoint: str = ""
    run_id: str = ""


@dataclass(frozen=True)
class Job:
    """What each process is given: the run's folder on its host, the checkpoint to start from, the launching agent's
    device, the Runner's options, and the launching process's id."""

    folder: str
    start: str
    device: str
    options: dict = field(default_factory=dict)
    launcher: int = 0


def process_device(device: str, local_rank: int, local_processes: int) -> tuple[torch.device, str]:
    """Where process `local_rank` of the `local_processes` on its host trains, and the backend: each its own GPU with
    NCCL when the run asked for CUDA without naming a GPU and the host has a GPU per process; else with gloo, sharing
    the GPUs there are (or the one named), or on the CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return torch.device("cpu"), "gloo"
    gpus = torch.cuda.device_count()
    if device.index is None and gpus >= local_processes:
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cuda", device.index if device.index is not None else local_rank % gpus), "gloo"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def learn(agent, sink: Sink | None, options: dict, hosts: Hosts | None = None) -> dict:
    """Train `agent` on `agent.config.processes` processes and return process 0's summary, as `Agent.learn` does;
    `agent` then holds process 0's final state. `options` are the Runner's (end_step, eval_interval, ...)."""
    from trainer.checkpoint import load_checkpoint

    sink = sink or Sink()
    hosts = hosts or Hosts()
    processes = agent.config.processes
    if hosts.nodes < 1 or processes % hosts.nodes:
        raise ValueError(f"{processes} processes cannot be shared equally between {hosts.nodes} hosts")
    with tempfile.TemporaryDirectory(prefix="rlweb-processes-") as name:
        folder = Path(name)
        job = Job(folder=name, start=str(agent.save(folder / START_FILE)), device=str(agent.device), options=options,
                  launcher=os.getpid())
        # the launcher runs in a thread of its own: this one keeps the sink, as in a one-process run (its Redis and
        # database connections, the web app's heartbeat and SIGTERM handling stay as they are)
        launch = Launch(process_main, (job,), processes // hosts.nodes, hosts, folder)
        try:
            relay(launch.thread, sink, folder)
        except BaseException as error:  # the sink failed (the processes stop as at a cancel), or a second Ctrl-C:
            (folder / STOP_FILE).touch()  # then give up at once; the processes die with this one
            if not isinstance(error, KeyboardInterrupt):
                launch.thread.join(SHUTDOWN_SECONDS)
            raise
        try:
            results = launch.results()
        except Exception as error:
            raise failure(error, processes) from error
        if 0 in results:  # process 0 ran on this host: the agent goes on from where it ended
            load_checkpoint(folder / END_FILE, device=str(agent.device), into=agent)
        return results[min(results)]


class Launch:
    """`function(*args)` on `processes_here` processes of this host (and as many on each of the other `hosts`), with
    torchrun's launcher (`elastic_launch`) in a thread of its own: c10d rendezvous (on a free port of this host,
    unless several hosts meet at their endpoint), no restarts (a process that fails ends the run: the launcher stops
    the others), the processes' error files in `folder`."""

    def __init__(self, function, args: tuple, processes_here: int, hosts: Hosts, folder: Path):
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
        from torch.distributed.launcher.api import LaunchConfig

        self.config = LaunchConfig(
            min_nodes=hosts.nodes, max_nodes=hosts.nodes, nproc_per_node=processes_here,
            run_id=hosts.run_id or uuid.uuid4().hex, rdzv_backend="c10d",
            rdzv_endpoint=hosts.endpoint or "127.0.0.1:0", max_restarts=0, monitor_interval=0.1,
            start_method="spawn", logs_specs=DefaultLogsSpecs(log_dir=str(folder / "logs")))
        # the launcher warns that, in a thread, it cannot stop its processes on a signal: they die with this process
        # (follow_launcher), and this process stops them on a signal as at a cancel (relay, or the web app's worker)
        logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(no_signal_handler_warning)
        self.function, self.args = function, args
        self.outcome: dict = {}
        self.thread = threading.Thread(target=self._launch, name="rlweb-processes", daemon=True)
        self.thread.start()

    def _launch(self) -> None:
        from torch.distributed.launcher.api import elastic_launch

        try:
            self.outcome["results"] = elastic_launch(self.config, self.function)(*self.args)
        except BaseException as error:  # noqa: B036 (raised in the calling thread, by `results`)
            self.outcome["error"] = error

    def results(self) -> dict:
        """What each process of this host returned, by rank, once they all ended; ChildFailedError when one failed."""
        self.thread.join()
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["results"]


def no_signal_handler_warning(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Failed to register signal handlers")


def relay(thread: threading.Thread, sink: Sink, folder: Path) -> None:
    """While the processes train: hand process 0's events to `sink`, and pass on what it asks (stop, changes).
    Ctrl-C stops the processes as a cancel does (with a final checkpoint); a second one gives up at once."""
    events = JsonLines(folder / EVENTS_FILE)
    stop_file = folder / STOP_FILE
    next_poll = 0.0
    while thread.is_alive():
        try:
            for event in events.read():
                sink.emit(event)
            now = time.monotonic()
            if now >= next_poll:
                next_poll = now + RELAY_POLL_SECONDS
                if not stop_file.exists() and sink.should_stop():
                    stop_file.touch()
                changes = sink.changes()
                if changes:
                    append_lines(folder / CHANGES_FILE, changes)
            thread.join(RELAY_SECONDS)
        except KeyboardInterrupt:
            if stop_file.exists():
                raise
            stop_file.touch()
    for event in events.read():
        sink.emit(event)


def failure(error: BaseException, processes: int) -> BaseException:
    """A TrainingError for a run whose process failed: the process's own TrainingError message, or which process
    failed and how (an exception, a signal); other errors of the launch as they are."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    if not isinstance(error, ChildFailedError):
        return error
    rank, failed = error.get_first_failure()
    if failed.exitcode is not None and failed.exitcode < 0:
        return TrainingError(f"process {rank} of {processes} died ({failed.signal_name()}); the others were stopped")
    message = failed.message  # the exception as "Type: text", or a dict holding it with its traceback
    if isinstance(message, dict):
        message = message.get("message", "")
    message = str(message)
    kind, _, detail = message.partition(": ")
    if kind == "TrainingError":
        return TrainingError(f"{detail} (process {rank} of {processes})")
    return TrainingError(f"process {rank} of {processes} failed: {message or f'exit code {failed.exitcode}'}")


def process_main(job: Job) -> dict:
    """Each process's entry point (launched by `learn`): torchelastic's `record` writes an exception's message and
    traceback where the launcher reads them."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(train_process)(job)


def train_process(job: Job) -> dict:
    from trainer.checkpoint import load_checkpoint

    follow_launcher(job.launcher)
    local_rank, local_processes = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    device, backend = process_device(job.device, local_rank, local_processes)
    torch.set_num_threads(max(1, usable_cores() // local_processes))
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    try:
        group = ProcessGroup(device, backend)
        use_group(group)
        agent = load_checkpoint(job.start, device=str(device))
        group.broadcast_modules(agent.modules.values())  # the same weights, whatever start file each host made
        agent.seed_process()
        folder = Path(job.folder)
        sink = ProcessSink(folder, main=group.rank == 0)
        try:
            summary = agent.run(DistributedRunner(agent, group, sink=sink, **job.options))
        finally:
            sink.close()
        if group.rank == 0:
            agent.save(folder / END_FILE)
        atexit.register(leave)
        return summary
    finally:
        dist.destroy_process_group()


def leave() -> None:
    """The last thing a process does once its work is done and its summary handed over (at exit): leave at once,
    without tearing down torch's modules, which took a second on a busy machine while the launcher waited (and with
    it a cancel's end). Everything it wrote is closed by then."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


PR_SET_PDEATHSIG = 1


def follow_launcher(launcher: int) -> None:
    """End with the process that launched this one, even when it is killed outright (SIGKILL: nothing of it can stop
    the processes then). torch's launcher asks for SIGINT at its death, which a process started in the background
    ignores (and passes on ignored): SIGKILL instead. And take stop signals from it alone: a Ctrl-C or SIGTERM to its
    process group reaches it, and it stops the run as a cancel does."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != launcher:  # it died before this process could ask
        os._exit(1)
    os.setpgrp()
