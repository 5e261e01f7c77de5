"""The runner drives one training run: it counts env steps, evaluates, checkpoints, records episode
videos, asks the sink whether to stop, and reports everything as events. Algorithms call `advance`,
`episode` and `record`.
"""

from __future__ import annotations

import math
import time
import traceback
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import torch

from trainer.envs import make_env
from trainer.events import Sink, make_event
from trainer.params import ConfigError, interval_errors
from trainer.system_metrics import ENV, OTHER, UPDATE, PhaseTimes, SystemSampler, interval_seconds
from trainer.video import CannotRender, record_episode, video_env

STOP_POLL_SECONDS = 0.5  # how often the sink is asked whether to stop, and for changes (Redis calls in the web app)
TIME_EVENT_SECONDS = 2.0  # how often throughput is reported


class TrainingError(RuntimeError):
    """Training cannot go on: the loss became NaN, the environment raised, memory ran out, or the final
    checkpoint could not be written. The message says what happened, for the run's page."""


def training_error(error: Exception, step: int, env_id: str) -> TrainingError | None:
    """A clear TrainingError for an error the user can act on (None for others, reported as they are)."""
    if isinstance(error, TrainingError):
        return error
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return TrainingError(f"out of memory at step {step:,} ({type(error).__name__}: {error}): use a smaller "
                             f"replay buffer (buffer_size), batch or network, or fewer envs")
    frames = traceback.walk_tb(error.__traceback__)
    if any(isinstance(frame.f_locals.get("self"), (gym.Env, gym.vector.VectorEnv)) for frame, _ in frames):
        return TrainingError(f"the environment {env_id} raised {type(error).__name__} at step {step:,}: {error}")
    return None


class Runner:
    def __init__(self, agent, end_step: int, sink: Sink | None = None, eval_interval: int = 0,
                 eval_episodes: int = 5, checkpoint_interval: int = 0, checkpoint_dir: str | Path | None = None,
                 log_interval: int = 0, video_interval: int = 0, video_dir: str | Path | None = None):
        self.agent = agent
        self.start_step = agent.steps_done
        self.end_step = int(end_step)
        self.sink = sink or Sink()
        self.eval_interval = int(eval_interval)
        self.eval_episodes = int(eval_episodes)
        self.checkpoint_interval = int(checkpoint_interval)
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.video_interval = int(video_interval)
        self.video_dir = Path(video_dir or checkpoint_dir) if (video_dir or checkpoint_dir) else None
        if self.video_interval and self.video_dir is None:
            raise ValueError("video_interval needs a video_dir (or a checkpoint_dir) to write the videos to")
        errors = interval_errors(self.end_step, self.checkpoint_interval, self.video_interval)
        if errors:
            raise ConfigError(errors)
        # train metrics are averaged over this many env steps before they are sent
        self.log_interval = int(log_interval) or max(100, (self.end_step - self.start_step) // 500)
        self.stopped = False  # training stops (for good: once set, it stays)
        self._asked = False  # this process was asked to stop (by its sink)
        # a resumed run keeps its best: the "best" checkpoint is only replaced by a better evaluation
        self.best_eval = agent.best_eval_return if agent.best_eval_return is not None else float("-inf")
        self.last_eval: dict | None = None
        self._train_sums: dict[str, float] = defaultdict(float)
        self._train_counts: dict[str, int] = defaultdict(int)
        self._changes: list[dict] = []  # hyperparameter changes asked for, waiting for their step
        self._eval_env = None
        self._video_env = None  # made at the first recording; False once the env turned out not to render
        # system metrics (trainer/system_metrics.py), sent with a `time` event every few seconds; None: off
        interval = interval_seconds()
        self.system = SystemSampler(agent.device, interval) if interval > 0 else None
        self.phases = agent.phases = PhaseTimes() if self.system else None
        self._start_clock()

    def _start_clock(self) -> None:
        self._started = time.monotonic()
        self._clock_zero = self._started - self.agent.seconds_trained  # event times go on from the agent's clock
        self._next_time_event = self._started + TIME_EVENT_SECONDS
        self._next_stop_poll = self._started
        self._last_time_event = (self._started, self.agent.steps_done)

    # --- what algorithms call ------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return self.agent.steps_done

    @property
    def progress(self) -> float:
        """Fraction of the run done, for schedules (1.0 at `end_step`)."""
        return min(1.0, self.agent.steps_done / max(1, self.end_step))

    def advance(self, env_steps: int = 1) -> bool:
        """Count env steps; evaluate, checkpoint and report when due. False means: stop training now."""
        if self.phases:
            self.phases.lap(ENV)  # the env step and what the loop did with it
        before = self.agent.steps_done
        self.agent.steps_done = after = before + env_steps
        if self.log_interval and after // self.log_interval > before // self.log_interval:
            self._flush_train()
        if self.eval_interval and after // self.eval_interval > before // self.eval_interval and after < self.end_step:
            self._evaluate()
        if self.checkpoint_interval and after // self.checkpoint_interval > before // self.checkpoint_interval \
                and after < self.end_step:
            self._checkpoint(f"step_{after}.zip", "periodic")
        if self.video_interval and after // self.video_interval > before // self.video_interval \
                and after < self.end_step:
            self._record_video()
        now = time.monotonic()
        if now >= self._next_time_event:
            self._time_event(now)
        if self._changes:
            self._apply_due_changes()
        keep_going = not self.should_stop() and after < self.end_step
        if self.phases:
            self.phases.lap(OTHER)  # the runner's own work
        return keep_going

    def should_stop(self) -> bool:
        """Whether to stop training now: the run was asked to stop. Cheap enough to call between gradient updates
        and env steps: every long loop of the training calls it (cancel within 2 s). In a run on several processes
        (trainer/distributed.py) every process gets the same answer at the same call, so the training loops call it
        at the same points on every process; a loop that only this process runs asks `stop_asked` instead."""
        self.stopped = self.stopped or self.stop_asked()
        return self.stopped

    def stop_asked(self) -> bool:
        """Whether this process was asked to stop. Asks the sink at most every STOP_POLL_SECONDS; the same poll takes
        the hyperparameter changes asked for, and applies those that are due."""
        if not self._asked:
            now = time.monotonic()
            if now >= self._next_stop_poll:
                self._next_stop_poll = now + STOP_POLL_SECONDS
                self._asked = bool(self.sink.should_stop())
                self._take_changes()
        return self._asked

    def stop_agreed(self, stopping: bool) -> bool:
        """Whether to stop, after a part of the work that only this process did (an ES generation's candidates) ended
        early when `stopping`. In one process that is all; on several, every process gets the same answer: stop if any
        of them ended early or was asked to."""
        self.stopped = self.stopped or stopping
        return stopping

    # --- hyperparameters changed while the run trains ------------------------------------------------------
    def _take_changes(self) -> None:
        self._changes += self.sink.changes()
        if self._changes:
            self._apply_due_changes()

    def _apply_due_changes(self) -> None:
        """Apply the changes asked for whose step has come (those without one at once), in the order asked."""
        steps = self.agent.steps_done
        due = [change for change in self._changes if int(change.get("step") or 0) <= steps]
        self._changes = [change for change in self._changes if int(change.get("step") or 0) > steps]
        for change in due:
            self._apply_change(change)

    def _apply_change(self, change: dict) -> None:
        """Check a change as the form would (trainer.params.check_live_changes), apply it to the agent and report
        a `hyperparameters` event: the old and new values, or the error (nothing changed, the run goes on)."""
        named = {"id": change["id"]} if change.get("id") is not None else {}
        requested = dict(change.get("values") or {})
        try:
            values = self.agent.check_live_changes(requested)
        except ConfigError as error:
            self.emit("hyperparameters", {**named, "error": str(error), "errors": error.errors,
                                          "requested": {name: str(value) for name, value in requested.items()}})
            return
        old = self.agent.apply_live_changes(values, self.progress)
        self.emit("hyperparameters", {**named, "changes": {name: {"old": old[name], "new": value}
                                                           for name, value in values.items()}})

    def episode(self, episode_return: float, length: int, **values) -> None:
        self.emit("episode", {"rollout/episode_return": float(episode_return), "rollout/episode_length": int(length),
                              **values})

    def record(self, values: dict) -> None:
        """Training metrics (`train/...`); averaged and sent every `log_interval` env steps. A loss that is
        NaN or infinite ends the run (TrainingError) before any checkpoint holds the weights it spoilt.

        Values that are tensors on a GPU are summed there and read at the next report: reading one now
        would make the CPU wait for the update that made it, every update, instead of stepping the envs
        while the GPU works. Their losses are checked at that report, and the weights before any checkpoint."""
        if self.phases:
            self.phases.lap(UPDATE)
        for key, value in values.items():
            if isinstance(value, torch.Tensor) and value.device.type != "cpu":
                self._train_sums[key] = value.detach().to(torch.float64) + self._train_sums[key]
            else:
                self._train_sums[key] += self._finite(key, float(value))
            self._train_counts[key] += 1

    def _finite(self, key: str, value: float) -> float:
        if not math.isfinite(value) and ("loss" in key or "td_error" in key):
            raise TrainingError(f"the loss became {value} at step {self.steps:,} ({key}): lower the learning "
                                f"rate, scale or clip the rewards, or clip the gradients (max_grad_norm)")
        return value

    def emit(self, kind: str, values: dict, seconds: float | None = None) -> None:
        """Send an event stamped with the run's clock (`seconds` on it, or now)."""
        self.sink.emit(make_event(kind, self.agent.steps_done, self._clock() if seconds is None else seconds, values))

    # --- the run --------------------------------------------------------------------------------------
    def run(self) -> dict:
        self._start_clock()
        self.emit("started", {"algorithm": self.agent.name, "env_id": self.agent.env_id,
                              "device": str(self.agent.device), "seed": self.agent.seed,
                              "start_step": self.start_step, "end_step": self.end_step,
                              "hyperparameters": self.agent.hyperparameters(),
                              "notes": self.agent.notes(self.end_step), **self._extras("started")})
        try:
            if self.agent.steps_done < self.end_step and self._start_training():
                if self.agent.eval_due:  # the evaluation at this step was interrupted by the stop that ended
                    self._evaluate()     # the attempt before: the history gets it before training goes on
                self.agent.train(self)
                self._training_ended()
                if self.system:  # every run that trained has a sample, also one shorter than the interval
                    self.emit("time", self._system_sample(time.monotonic()))
            else:
                self.stopped = self.agent.steps_done < self.end_step
            self._flush_train()
            if self.eval_episodes > 0 and not self._stopping():
                self._evaluate()
            if self.video_interval and not self._stopping():
                self._record_video()
            # a run cancelled before its first step holds only the weights it was made with: no file for those
            untrained = self._stopping() and self.agent.steps_done == 0
            final = self._checkpoint("final.zip", "final", required=True) \
                if self.checkpoint_dir and not untrained else None
        except Exception as error:
            clear = training_error(error, self.agent.steps_done, self.agent.env_id)
            self.emit("failed", {"error": str(clear) if clear else f"{type(error).__name__}: {error}",
                                 "traceback": traceback.format_exc(),
                                 "seconds": round(time.monotonic() - self._started, 3)})
            if clear is None or clear is error:
                raise
            raise clear from error
        finally:
            self.agent.seconds_trained = self._clock()
            for env in (self._eval_env, self._video_env):
                if env:
                    env.close()
        status = "cancelled" if self._stopping() else "succeeded"
        summary = {"status": status, "steps": self.agent.steps_done,
                   "seconds": round(time.monotonic() - self._started, 3),  # this attempt's, not the run clock's
                   "eval_return_mean": self.last_eval["mean"] if self.last_eval else None,
                   "eval_return_std": self.last_eval["std"] if self.last_eval else None,
                   "best_eval_return": self.agent.best_eval_return,
                   "final_checkpoint": str(final) if final else None, **self._extras("finished")}
        self.emit("finished", summary)
        return summary

    def _stopping(self) -> bool:
        """Whether the run ends cancelled: training stopped early, or a stop came (during the final evaluation)."""
        return self.stopped or self._asked

    def _start_training(self) -> bool:
        """Whether training starts: no stop was asked for before it did. Takes the changes asked for before this
        attempt started (a resumed run's, replayed)."""
        if self.sink.should_stop():
            return False
        self._take_changes()
        return True

    def _training_ended(self) -> None:
        """Called when the algorithm's training loop returns (DistributedRunner collects the last episodes)."""

    def _extras(self, kind: str) -> dict:
        """More values for the `started` event and the summary (DistributedRunner: how many processes)."""
        return {}

    def _evaluate(self) -> None:
        if self._eval_env is None:
            self._eval_env = make_env(self.agent.env_id)
            seed = self.agent.seed + 1_000_003
        else:
            seed = None  # later evaluations continue the eval env's own random stream
        result = self.agent.evaluate(self.eval_episodes, seed=seed, env=self._eval_env, should_stop=self.stop_asked)
        self.agent.eval_due = result is None  # interrupted by a stop: not reported, done when the run resumes
        if result is None:
            return
        self.last_eval = result
        self.emit("eval", {"eval/return_mean": result["mean"], "eval/return_std": result["std"],
                           "eval/length_mean": result["length_mean"]})
        self._next_stop_poll = 0.0  # a sink that decides on evaluations (a sweep's pruner) is asked at once
        if result["mean"] > self.best_eval:
            self.best_eval = self.agent.best_eval_return = result["mean"]
            if self.checkpoint_dir:
                self._checkpoint("best.zip", "best")

    def _record_video(self) -> None:
        """One greedy episode as an mp4 and a `video` event; an env that cannot render is reported once
        (a `video` event with an `error`) and recording stops, the run goes on. A video that cannot be
        written (disk full, permissions) is reported as a `video` event with `error` and `step`, and the
        next one is tried; a stop abandons the recording."""
        if self._video_env is False:
            return
        try:
            if self._video_env is None:
                self._video_env = video_env(self.agent.env_id)
                seed = self.agent.seed + 2_000_003
            else:
                seed = None  # later videos continue the video env's own random stream
            path = self.video_dir / f"video_step_{self.agent.steps_done}.mp4"
            result = record_episode(self.agent, self._video_env, path, seed=seed, should_stop=self.stop_asked)
        except CannotRender as error:
            if self._video_env:
                self._video_env.close()
            self._video_env = False
            self.emit("video", {"error": f"No videos: {error}"})
            return
        except OSError as error:
            self.emit("video", {"error": f"The video could not be written: {error}", "step": self.agent.steps_done})
            return
        if result is not None:
            self.emit("video", {**result, "step": self.agent.steps_done})

    def _clock(self) -> float:
        """Seconds on the run's clock: what the agent had trained before this attempt, plus this attempt's."""
        return time.monotonic() - self._clock_zero

    def _checkpoint(self, filename: str, tag: str, required: bool = False) -> Path | None:
        """Save the agent; a checkpoint that cannot be written (disk full, permissions) is reported as a
        `checkpoint` event with `tag`, `step` and `error` (no `path`), and the run goes on, unless it is
        `required` (the final one, which holds the run's last weights): then the run fails. Weights that are
        NaN or infinite are never saved: the run fails instead, its last good checkpoint kept."""
        if not all(torch.isfinite(p).all() for module in self.agent.modules.values() for p in module.parameters()):
            raise TrainingError(f"the weights became NaN or infinite at step {self.steps:,}: lower the learning "
                                f"rate, scale or clip the rewards, or clip the gradients (max_grad_norm)")
        # the event carries the clock the checkpoint holds: a run resumed from it reports later times only
        self.agent.seconds_trained = saved_at = self._clock()
        try:
            path = self.agent.save(self.checkpoint_dir / filename)
        except OSError as error:
            message = f"the {tag} checkpoint could not be written: {error}"
            self.emit("checkpoint", {"tag": tag, "step": self.agent.steps_done, "error": message}, seconds=saved_at)
            if required:
                raise TrainingError(message) from error
            return None
        self.emit("checkpoint", {"path": str(path), "tag": tag, "step": self.agent.steps_done}, seconds=saved_at)
        return path

    def _flush_train(self) -> None:
        if self._train_counts:
            sums = {key: self._finite(key, float(self._train_sums[key])) for key in self._train_counts}
            self.emit("train", {key: sums[key] / self._train_counts[key] for key in self._train_counts})
            self._train_sums.clear()
            self._train_counts.clear()

    def _time_event(self, now: float) -> None:
        last_time, last_steps = self._last_time_event
        rate = (self.agent.steps_done - last_steps) / max(now - last_time, 1e-9)
        self._last_time_event = (now, self.agent.steps_done)
        self._next_time_event = now + TIME_EVENT_SECONDS
        values = {"time/steps_per_second": round(rate, 2), "time/progress": round(self.progress, 4)}
        if self.system and self.system.due(now):
            values.update(self._system_sample(now))
        self.emit("time", values)

    def _system_sample(self, now: float) -> dict:
        """The system metrics now, with the time split since the last sample (trainer/system_metrics.py)."""
        return {**self.system.sample(now), **self.phases.percents()}
