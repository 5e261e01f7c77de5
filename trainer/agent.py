"""The base every algorithm builds on: construction, acting, evaluation, saving and `learn()`."""

from __future__ import annotations

import contextlib
import ctypes
import platform
import random
from pathlib import Path

import numpy as np
import torch

from trainer import distributed
from trainer.checkpoint import save_checkpoint
from trainer.envs import env_spaces, make_env, make_vector_env
from trainer.events import Sink
from trainer.notes import run_notes
from trainer.params import check_live_changes
from trainer.runner import Runner
from trainer.schedules import annealed


def resolve_device(device: str) -> torch.device:
    """"auto" picks CUDA when the worker has it; asking for CUDA where there is none is an error."""
    if isinstance(device, torch.device) and device.type == "meta":  # shapes only (trainer.resources)
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        resolved = None
    if resolved is None or resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r:.60}: use auto, cpu, cuda or cuda:N")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but this worker has no CUDA GPU (use 'auto' or 'cpu')")
    return resolved


def flushing_denormals() -> bool:
    """Whether this thread's float arithmetic flushes denormal numbers to zero."""
    return torch.tensor([1e-39]).mul(1.0).item() == 0.0


@contextlib.contextmanager
def denormals_flushed():
    """Treat denormal floats (below about 1e-38) as zero while training, then restore this thread's setting.

    Adam's first moments of weights that stop getting gradients (a dead ReLU unit) shrink by 0.9 a step
    and turn denormal within a thousand updates; on x86 CPUs every operation on a denormal is many times
    slower, and the optimizer step became a quarter of a TD3 update. Flushing them changes values only
    below 1e-38 (torch.set_flush_denormal; it acts on the calling thread, which runs the training).
    """
    before = flushing_denormals()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


def keep_freed_memory() -> None:
    """Let this process keep the memory it frees for reuse (glibc's malloc; elsewhere nothing changes).

    glibc hands freed memory back to the OS once a few megabytes lie free at the top of its heap, and a
    CNN's update frees and allocates megabytes each pass (the gradient of the 3136x512 weight of the
    Nature CNN alone is 6.4 MB). Each update then wrote to about 2,000 fresh pages, and a Nature-DQN
    update on Atari took 1.2x as long on a CPU (docs/benchmarks.md). From here on, blocks up to 32 MB
    come from the heap and up to 256 MB of free heap is kept; bigger arrays (replay buffers) are still
    mapped and returned one by one. Set for the rest of the process (a worker trains run after run).
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    mallopt = ctypes.CDLL(None).mallopt
    mallopt(-3, 32 * 2**20)  # M_MMAP_THRESHOLD: blocks below it are carved from the heap
    mallopt(-1, 256 * 2**20)  # M_TRIM_THRESHOLD: free heap kept before any is handed back


def never() -> bool:
    """The `should_stop` of an update or evaluation that nothing interrupts."""
    return False


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python, NumPy and torch in one place; return the generator the agent draws from."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


class Agent:
    """An algorithm bound to an environment id. Subclasses define `build`, `act` and `train`.

    `modules` and `optimizers` name what a checkpoint holds; `extra_state` is small JSON state
    (normalisation statistics, counters) stored beside the weights.
    """

    name = ""  # the registry name, set by each algorithm
    preset = None  # the name of the preset it was made from (trainer/presets.py), if any
    phases = None  # the runner's PhaseTimes (trainer/system_metrics.py): the training envs' steps are timed

    def __init__(self, env_id: str, config, seed: int = 0, device: str = "auto",
                 observation_space=None, action_space=None):
        self.env_id = env_id
        self.config = config
        self.seed = int(seed)
        self.device = resolve_device(device)
        if observation_space is None or action_space is None:
            observation_space, action_space = env_spaces(env_id)
        self.observation_space = observation_space
        self.action_space = action_space
        self.steps_done = 0  # env steps trained so far, across learn() calls and resumes
        self.best_eval_return: float | None = None  # the best evaluation so far, across learn() calls and resumes
        self.eval_due = False  # a periodic evaluation was interrupted by a stop: done first when the run resumes
        # the run's clock: seconds trained up to steps_done, across learn() calls and resumes (event times
        # go on from it, so a resumed run's wall-time axis continues from its checkpoint)
        self.seconds_trained = 0.0
        # this process's place in the run: one of several when the run trains on several (trainer/distributed.py)
        self.group = distributed.current_group()
        self.rng = seed_everything(self.seed)
        self.modules: dict[str, torch.nn.Module] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.build()

    # --- what an algorithm provides -------------------------------------------------------------
    def build(self) -> None:
        raise NotImplementedError

    def act(self, observations: np.ndarray, deterministic: bool) -> np.ndarray:
        """Actions for a batch of observations."""
        raise NotImplementedError

    def train(self, runner) -> None:
        """The training loop; calls `runner.advance(n)` after every env step and stops when it says so."""
        raise NotImplementedError

    @property
    def local_envs(self) -> int:
        """The envs this process steps: the config's `num_envs`, split between the run's processes."""
        return self.config.num_envs // self.group.size

    def seed_process(self) -> None:
        """Seed this process's random numbers (actions sampled, minibatch order) apart from the other processes' of a
        run on several; process 0 draws as a one-process run does."""
        self.rng = seed_everything(self.seed + self.group.seed_offset)

    def running_statistics(self) -> list:
        """The RunningMeanStd statistics this agent keeps while it trains (normalisation), which the processes of a
        run on several merge at every update."""
        return []

    @contextlib.contextmanager
    def training_envs(self, num_envs: int):
        """`(envs, first observations)` for `train()`, closed when it ends however it ends. A resumed run seeds
        them from its step count, so that it does not play again the episodes it has played; each process of a run
        on several seeds its own apart. They are stepped as the config's `vectorization` says (sync where it has
        none)."""
        seed = self.seed + self.group.seed_offset + self.steps_done
        envs = make_vector_env(self.env_id, num_envs, seed=seed,
                               vectorization=getattr(self.config, "vectorization", "sync"))
        if self.phases is not None:
            envs.step = self.phases.timed_step(envs.step)
        try:
            observations, _ = envs.reset(seed=seed)
            yield envs, observations
        finally:
            envs.close()

    def extra_state(self) -> dict:
        return {}

    def load_extra_state(self, state: dict) -> None:
        pass

    def reset_state(self, batch: int = 1) -> None:
        """Called before every episode played with `predict`: a recurrent agent forgets the last one."""

    # --- shared behaviour -----------------------------------------------------------------------
    def predict(self, observation, deterministic: bool = True):
        """The action for one observation."""
        batch = np.asarray(observation)[None]
        return self.act(batch, deterministic)[0]

    def evaluate(self, episodes: int = 10, seed: int | None = None, env=None, should_stop=None) -> dict | None:
        """Mean and standard deviation of the return over `episodes` episodes of the greedy policy,
        played on a separate env (made here unless given). `should_stop`, asked between steps, interrupts
        it: then the result is None."""
        own_env = env is None
        if own_env:
            env = make_env(self.env_id)
            seed = self.seed + 1_000_003 if seed is None else seed  # reproducible, apart from training seeds
        returns, lengths = [], []
        try:
            observation, _ = env.reset(seed=seed)  # a given env without a seed continues its own stream
            for _ in range(episodes):
                self.reset_state()
                total, length, done = 0.0, 0, False
                while not done:
                    if should_stop is not None and should_stop():
                        return None
                    action = self.predict(observation, deterministic=True)
                    observation, reward, terminated, truncated, _ = env.step(action)
                    total += float(reward)
                    length += 1
                    done = terminated or truncated
                returns.append(total)
                lengths.append(length)
                observation, _ = env.reset()
        finally:
            if own_env:
                env.close()
        return {"mean": float(np.mean(returns)), "std": float(np.std(returns)),
                "length_mean": float(np.mean(lengths)), "returns": returns}

    def learn(self, total_steps: int, sink: Sink | None = None, eval_interval: int = 0, eval_episodes: int = 5,
              checkpoint_interval: int = 0, checkpoint_dir: str | Path | None = None, end_step: int | None = None,
              log_interval: int = 0, video_interval: int = 0, video_dir: str | Path | None = None,
              hosts: distributed.Hosts | None = None) -> dict:
        """Train for `total_steps` more env steps (or up to `end_step`, for a resumed run) and return a
        summary. Evaluation and checkpoints happen every `eval_interval`/`checkpoint_interval` steps
        (0 turns them off); a final evaluation and checkpoint always happen when a folder is given. Every
        `video_interval` steps and at the end, one greedy episode is written as an mp4 into `video_dir`
        (default: `checkpoint_dir`). Denormal floats count as zero while it trains (`denormals_flushed`), and the
        process keeps the memory it frees (`keep_freed_memory`). With `processes` > 1 in the config, the run trains
        on that many processes (trainer/distributed.py; `hosts` for several hosts), and this agent then holds their
        final state."""
        options = dict(end_step=end_step if end_step is not None else self.steps_done + total_steps,
                       eval_interval=eval_interval, eval_episodes=eval_episodes,
                       checkpoint_interval=checkpoint_interval, checkpoint_dir=checkpoint_dir,
                       log_interval=log_interval, video_interval=video_interval, video_dir=video_dir)
        if getattr(self.config, "processes", 1) > 1 and self.group.size == 1:
            return distributed.learn(self, sink, options, hosts)
        return self.run(Runner(self, sink=sink, **options))

    def run(self, runner: Runner) -> dict:
        """`runner.run()`, with denormal floats counted as zero and the memory freed kept (see `learn`)."""
        keep_freed_memory()
        with denormals_flushed():
            return runner.run()

    def save(self, path: str | Path) -> Path:
        return save_checkpoint(self, path)

    def notes(self, total_steps: int | None = None) -> list[str]:
        """What a run of `total_steps` will do that its settings alone do not say (trainer/notes.py)."""
        return run_notes(self.config, self.observation_space, total_steps)

    def hyperparameters(self) -> dict:
        return dict(self.config.__dict__)

    # --- hyperparameters changed while it trains ------------------------------------------------------------
    def check_live_changes(self, requested: dict) -> dict:
        """`requested` parsed and checked against this agent's config, as the form checks a new one:
        {name: new value}; ConfigError for a hyperparameter that is not live or a bad value."""
        return check_live_changes(type(self.config), self.hyperparameters(), requested)

    def apply_live_changes(self, values: dict, progress: float = 0.0) -> dict:
        """Change checked hyperparameters (`check_live_changes`) in place and return their old values. The
        config is changed in place, so the training loop (which holds it) reads the new values at its next use
        and a checkpoint saves them. A learning rate goes into its optimizers' parameter groups at once; with an
        `lr_schedule` it becomes the schedule's base (linear: new value x (1 - progress) from now on). What an
        algorithm derives from its config (an epsilon schedule, a noise process) follows in `live_changed`."""
        old = {name: getattr(self.config, name) for name in values}
        for name, value in values.items():
            setattr(self.config, name, value)
        schedule = getattr(self.config, "lr_schedule", "constant")
        for name, groups in self.learning_rate_groups().items():
            if name in values:
                for group in groups:
                    group["lr"] = annealed(values[name], schedule, progress)
        self.live_changed(set(values))
        return old

    def learning_rate_groups(self) -> dict[str, list[dict]]:
        """Which optimizer parameter groups learn at which config learning rate: by default `learning_rate` for
        every group of every optimizer. Algorithms with several rates say which is whose."""
        if not hasattr(self.config, "learning_rate"):
            return {}
        return {"learning_rate": [group for optimizer in self.optimizers.values() for group in optimizer.param_groups]}

    def live_changed(self, names: set[str]) -> None:
        """Called after `names` changed in the config while training: rebuild what derives from them."""
