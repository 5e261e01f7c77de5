"""Log a stable-baselines3 training run to rlweb with one callback:

    from rlweb_client.sb3 import RlwebCallback
    model = PPO("MlpPolicy", "CartPole-v1", seed=1)
    model.learn(100_000, callback=RlwebCallback(experiment="sb3-ppo-cartpole"))

Every finished episode becomes `rollout/episode_return` and `rollout/episode_length` at its env step (what the run
page counts episodes by and the compare page scores runs by), every value SB3's logger records (`train/loss`,
`rollout/ep_rew_mean`, `time/fps`, ...) goes at the step SB3 writes it, and the run's config holds the algorithm,
the environment, the seed and the model's hyperparameters. `checkpoint_every=N` saves the model every N env steps
and at the end, and uploads each file; `video_folder=` uploads the episode videos that appear there (SB3's
`VecVideoRecorder`'s folder) at the step they are found. The run ends `succeeded` when `learn()` returns, `failed`
with the traceback when the script dies of an exception.

This module imports stable-baselines3, which the script has; `import rlweb_client` alone does not import it."""

from __future__ import annotations

import numbers
import os
from typing import Any, Optional

from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter

from rlweb_client.run import Run, init
from rlweb_client.videos import VideoFolder

__all__ = ["RlwebCallback", "model_config"]

SKIPPED = {"num_timesteps", "verbose", "start_time", "tensorboard_log"}  # facts of the process, not settings


def model_config(model, training_env=None) -> dict:
    """The algorithm's class, its policy's, the environment's id and the model's plain settings (numbers, strings,
    booleans: a schedule or an object is left out)."""
    config: dict[str, Any] = {"algorithm": type(model).__name__, "policy": type(model.policy).__name__}
    env_id = environment_id(training_env if training_env is not None else model.get_env())
    if env_id:
        config["env_id"] = env_id
    for name, value in sorted(vars(model).items()):
        if name.startswith("_") or name in SKIPPED or name in config:
            continue
        if isinstance(value, (bool, str)) or isinstance(value, numbers.Real):
            config[name] = value
    return config


def environment_id(env) -> str:
    """The Gymnasium id of a vectorised env's first env, or "" when it has none."""
    try:
        spec = env.get_attr("spec", indices=[0])[0]
    except Exception:  # noqa: BLE001  (an env of its own, without a spec: the config just lacks an id)
        return ""
    return getattr(spec, "id", "") or ""


def scalar(value) -> Optional[float]:
    """A logged value as a number (numpy and torch scalars included), or None for text, images, videos and arrays."""
    if isinstance(value, (bool, str)):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return float(value.item())
    return None


class RunWriter(KVWriter):
    """An output of SB3's logger: what it writes at a step goes to the run at that step."""

    def __init__(self, run: Run):
        self.run = run

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0) -> None:
        values = {key: number for key, value in key_values.items() if (number := scalar(value)) is not None}
        if values:
            self.run.log(values, step=step)

    def close(self) -> None:
        pass


class RlwebCallback(BaseCallback):
    """Sends a stable-baselines3 model's training to rlweb: give `experiment` (and any of `rlweb_client.init`'s
    options: url, token, name, project, ...), or a `run` you made with `rlweb_client.init`, which is then yours to
    finish. `config` adds to (or overrides) what the callback reads off the model. `checkpoint_every`: env steps
    between saved models (0: none), each uploaded from `checkpoint_dir` (default ./rlweb-checkpoints/<experiment>);
    keep the files until the run has ended. `video_folder`: a folder whose new .mp4 files are uploaded after each
    rollout and at the end (SB3's VecVideoRecorder writes one there as it finishes recording, in the training's
    own thread, so a file found is whole). With `resume` ("auto" or a run's id, see `init`) the run goes on from the
    model's step count (a model loaded from its checkpoint, learning with `reset_num_timesteps=False`), what was
    logged past it forgotten, unless `from_step` says otherwise. `finish_at_end=False` keeps a run it made open
    after `learn()`, for
    another `learn(..., reset_num_timesteps=False)` with the same callback; finish it with `callback.run.finish()`."""

    def __init__(self, experiment: Optional[str] = None, *, run: Optional[Run] = None, config: Optional[dict] = None,
                 checkpoint_every: int = 0, checkpoint_dir: Optional[str] = None, video_folder: Optional[str] = None,
                 finish_at_end: bool = True, verbose: int = 0, **init_options):
        super().__init__(verbose)
        if (experiment is None) == (run is None):
            raise ValueError("RlwebCallback needs an experiment name, or a run made with rlweb_client.init")
        if checkpoint_every < 0:
            raise ValueError(f"checkpoint_every is 0 (none) or a number of env steps, not {checkpoint_every}")
        self.experiment, self.run, self.extra_config = experiment, run, dict(config or {})
        self.checkpoint_every = int(checkpoint_every)
        self.checkpoint_dir = checkpoint_dir or os.path.join(os.getcwd(), "rlweb-checkpoints", experiment or "run")
        self.owns_run, self.finish_at_end, self.init_options = run is None, finish_at_end, init_options
        self.videos = VideoFolder(video_folder) if video_folder else None
        self.ended = False
        self.saved_at = 0  # the env step of the last checkpoint saved

    def _init_callback(self) -> None:
        if self.ended:
            raise RuntimeError("this callback's run ended when the last learn() returned: make a new RlwebCallback "
                               "for a new run, or pass finish_at_end=False to go on in one run")
        if self.run is None:
            config = {**model_config(self.model, self.training_env), **self.extra_config}
            options = dict(self.init_options)
            if options.get("resume", os.environ.get("RLWEB_RESUME")) and "from_step" not in options:
                options["from_step"] = self.model.num_timesteps  # a loaded model goes on from its step count
            self.run = init(experiment=self.experiment, config=config, **options)
        outputs = self.model.logger.output_formats  # a learn() that resets the step count makes a new logger
        if not any(isinstance(output, RunWriter) and output.run is self.run for output in outputs):
            outputs.append(RunWriter(self.run))

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", ()):
            episode = info.get("episode")
            if episode is not None:  # SB3's Monitor: the episode's return and length, at the step it ended
                self.run.log({"rollout/episode_return": float(episode["r"]),
                              "rollout/episode_length": int(episode["l"])}, step=self.num_timesteps)
        every = self.checkpoint_every
        if every and self.num_timesteps // every > self.saved_at // every:
            self.save_checkpoint()
        return True

    def _on_rollout_end(self) -> None:
        self.send_videos()

    def _on_training_end(self) -> None:
        self.send_videos()
        if self.checkpoint_every and self.saved_at != self.num_timesteps:
            self.save_checkpoint()
        if self.owns_run and self.finish_at_end:
            self.run.finish()
            self.ended = True

    def save_checkpoint(self) -> None:
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        path = os.path.join(self.checkpoint_dir, f"step_{self.num_timesteps}.zip")
        self.model.save(path)
        self.run.log_checkpoint(path, step=self.num_timesteps)
        self.saved_at = self.num_timesteps

    def send_videos(self) -> None:
        """Upload the videos that appeared in `video_folder` since the last look, at the current step (SB3's
        recorder writes each in this thread: a file found is whole)."""
        for path in self.videos.new_videos(final=True) if self.videos is not None else ():
            self.run.log_video(path, step=self.num_timesteps)
