"""stable-baselines3 training logged through rlweb_client.sb3.RlwebCallback into a live server: real SB3 PPO on
CartPole, every episode stored as its Monitor counted it, SB3's logger values at their steps, the model's settings
as the run's config, checkpoints uploaded, and the run ended when learn() returns."""

from __future__ import annotations

import atexit
import sys
import time
import zipfile

import pytest

from rlweb.api.models import ApiToken
from rlweb.experiments.models import Event, Run
from tests.web.test_tensorboard_import import CLIENT

if str(CLIENT) not in sys.path:
    sys.path.insert(0, str(CLIENT))

stable_baselines3 = pytest.importorskip("stable_baselines3")


def stored_values(run: Run, key: str) -> list[tuple[int, float]]:
    return [(event.step, event.values[key]) for event in Event.objects.filter(run=run).order_by("seq")
            if key in event.values]


@pytest.mark.django_db(transaction=True)
def test_a_ppo_model_learning_with_the_callback_is_a_run_with_its_episodes_settings_and_checkpoints(
        live_server, owner, tmp_path):
    from rlweb_client.sb3 import RlwebCallback

    _, token = ApiToken.issue(owner, "sb3")
    model = stable_baselines3.PPO("MlpPolicy", "CartPole-v1", n_steps=256, batch_size=64, n_epochs=2, seed=3,
                                  device="cpu")
    videos = tmp_path / "videos"  # where SB3's VecVideoRecorder would write; one recorded before, one during
    videos.mkdir()
    (videos / "rl-video-step-0-to-step-200.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 first")

    class RecordsAVideo(stable_baselines3.common.callbacks.BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps == 600:
                (videos / "rl-video-step-600-to-step-800.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 second")
            return True

    callback = RlwebCallback(experiment="sb3-ppo-cartpole", url=live_server.url, token=token, checkpoint_every=512,
                             checkpoint_dir=str(tmp_path / "checkpoints"), offline_dir=str(tmp_path / "offline"),
                             video_folder=str(videos), flush_interval=0.05)
    model.learn(1024, callback=[RecordsAVideo(), callback])

    run = Run.objects.select_related("experiment", "logged").get(pk=callback.run.url.rstrip("/").split("/")[-1])
    assert run.status == Run.Status.SUCCEEDED and run.steps_done == 1024 and run.seed == 3
    assert run.experiment.name == "sb3-ppo-cartpole" and run.experiment.env_id == "CartPole-v1"
    config = run.logged.config
    assert (config["algorithm"], config["policy"], config["n_steps"], config["batch_size"], config["gamma"]) == (
        "PPO", "ActorCriticPolicy", 256, 64, 0.99)
    monitor = model.get_env().envs[0]  # SB3 wrapped the env in its Monitor, which counted every episode
    returns = stored_values(run, "rollout/episode_return")
    assert [value for _, value in returns] == monitor.get_episode_rewards()
    assert [value for _, value in stored_values(run, "rollout/episode_length")] == monitor.get_episode_lengths()
    assert [step for step, _ in returns] == sorted(step for step, _ in returns) and returns[-1][0] <= 1024
    losses = stored_values(run, "train/value_loss")  # SB3's logger, dumped after each update but the last's
    assert [step for step, _ in losses] == [512, 768, 1024] and all(value > 0 for _, value in losses)
    assert [step for step, _ in stored_values(run, "time/fps")] == [256, 512, 768, 1024]
    assert sorted(run.checkpoints.values_list("step", flat=True)) == [512, 1024]
    checkpoint = run.checkpoints.get(step=1024)
    with checkpoint.file.open("rb") as file, zipfile.ZipFile(file) as saved:
        assert "policy.pth" in saved.namelist()  # SB3's own save, as uploaded; rlweb never loads it

    assert sorted(run.videos.values_list("step", flat=True)) == [256, 768]  # found after the rollout they came in

    with pytest.raises(RuntimeError, match="ended when the last learn\\(\\) returned"):
        model.learn(256, callback=callback)


@pytest.mark.django_db(transaction=True)
def test_a_model_loaded_from_its_checkpoint_goes_on_in_the_same_run_with_resume_auto(live_server, owner, tmp_path):
    """A preempted SB3 job: trained to 1,024 steps and killed (its run still running), then started again from its
    step-512 checkpoint with `resume="auto"`: the same run goes on from step 512, what came after it forgotten."""
    from rlweb_client.sb3 import RlwebCallback

    _, token = ApiToken.issue(owner, "sb3")
    options = {"experiment": "sb3-preempted", "url": live_server.url, "token": token, "checkpoint_every": 512,
               "checkpoint_dir": str(tmp_path / "checkpoints"), "offline_dir": str(tmp_path / "offline"),
               "flush_interval": 0.05, "resume": "auto", "finish_at_end": False}
    settings = {"n_steps": 256, "batch_size": 64, "n_epochs": 1, "seed": 3, "device": "cpu"}
    first = RlwebCallback(**options)
    stable_baselines3.PPO("MlpPolicy", "CartPole-v1", **settings).learn(1024, callback=first)
    while first.run.pending:  # what it logged reached the server; then it dies without finishing
        time.sleep(0.05)
    atexit.unregister(first.run._at_exit)  # as a killed process never finishes it
    run_id = first.run.id
    assert Run.objects.get(pk=run_id).steps_done == 1024

    model = stable_baselines3.PPO.load(tmp_path / "checkpoints" / "step_512.zip", device="cpu")
    model.set_env(stable_baselines3.common.env_util.make_vec_env("CartPole-v1", n_envs=1, seed=3))
    second = RlwebCallback(**{**options, "finish_at_end": True})
    model.learn(512, callback=second, reset_num_timesteps=False)

    assert second.run.id == run_id
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.SUCCEEDED and run.attempts == 2 and run.steps_done == 1024
    resumed = Event.objects.get(run=run, kind="resumed")
    assert resumed.step == 512 and resumed.values["forgot_after"] is True
    steps = [step for step, _ in stored_values(run, "rollout/episode_return")]
    first_after = [step for step in steps if step > 512]
    assert first_after and all(event.seq > resumed.seq for event in Event.objects.filter(
        run=run, step__gt=512, kind="episode"))  # everything past step 512 is the second attempt's
    assert steps == sorted(steps)
