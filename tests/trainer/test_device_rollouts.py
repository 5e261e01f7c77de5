"""The GPU path of PPO, A2C and RND-PPO, run here on the CPU (it is device-agnostic): each observation goes to the
device once, as it is (uint8 images stay uint8), the policy acts on it there and the rollout buffer keeps it there;
training is the same as through the host path."""

import numpy as np
import pytest
import torch
import trainer
from trainer.actor_critic import ObservationUploader, reported
from trainer.events import ListSink


def trained(algorithm: str, device_rollouts: bool, env_id: str = "ALE/Pong-v5", steps: int = 64, **settings):
    agent = trainer.make(algorithm, env_id, seed=3, device="cpu", preset="auto", **settings)
    agent.device_rollouts = device_rollouts
    buffers = []
    new_buffer = agent.new_buffer

    def kept(*args, **kwargs):
        buffers.append(new_buffer(*args, **kwargs))
        return buffers[-1]

    agent.new_buffer = kept
    summary = agent.learn(steps, eval_episodes=0)
    return agent, buffers[0], summary


@pytest.mark.parametrize("algorithm, settings", [
    ("ppo", dict(num_envs=2, n_steps=8, batch_size=8, n_epochs=2)),
    ("a2c", dict(num_envs=2, n_steps=4)),
])
def test_rollouts_kept_on_the_device_train_as_through_the_host(algorithm, settings):
    """The host path on a CPU takes the values and log-probs from the acting pass, the device path from one pass over
    the rollout after it: the same actions, the same numbers up to float rounding."""
    on_device, device_buffer, _ = trained(algorithm, True, **settings)
    on_host, host_buffer, _ = trained(algorithm, False, **settings)
    assert isinstance(device_buffer.obs, torch.Tensor) and device_buffer.obs.dtype == torch.uint8  # images as uint8
    assert isinstance(host_buffer.obs, np.ndarray)
    np.testing.assert_array_equal(device_buffer.obs.numpy(), host_buffer.obs)
    np.testing.assert_array_equal(device_buffer.actions, host_buffer.actions)
    np.testing.assert_allclose(device_buffer.values, host_buffer.values, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(device_buffer.log_probs, host_buffer.log_probs, rtol=1e-4, atol=1e-5)
    for mine, theirs in zip(on_device.network.parameters(), on_host.network.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)


def test_rnd_ppo_trains_with_its_rollouts_on_the_device():
    agent, buffer, summary = trained("rnd-ppo", True, num_envs=2, n_steps=8, batch_size=8, n_epochs=1)
    assert isinstance(buffer.obs, torch.Tensor) and summary["steps"] == 64


def test_the_gpu_path_is_chosen_on_a_gpu_only_and_never_for_normalised_observations():
    agent = trainer.make("ppo", "CartPole-v1", seed=0, device="cpu", normalize_observations=True)
    assert not agent.new_buffer(4, 2).obs_on_device  # on a CPU, the host path
    agent.device, agent.device_rollouts = torch.device("meta"), None  # any device that is not a GPU
    assert not agent.new_buffer(4, 2).obs_on_device


def test_observations_reach_the_device_as_they_are_and_metrics_are_floats_on_a_cpu():
    observations = np.random.default_rng(0).integers(0, 255, (2, 4, 84, 84), dtype=np.uint8)
    uploaded = ObservationUploader(torch.device("cpu"))(observations)
    assert uploaded.dtype == torch.uint8 and np.array_equal(uploaded.numpy(), observations)
    assert reported(torch.tensor(1.5, requires_grad=True) * 2) == 3.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device machine)")
@pytest.mark.parametrize("algorithm, settings", [
    ("ppo", dict(num_envs=2, n_steps=8, batch_size=8, n_epochs=2)),
    ("a2c", dict(num_envs=2, n_steps=4)),
])
def test_on_a_gpu_rollouts_stay_there_as_uint8_and_metrics_are_read_at_reports(algorithm, settings):
    agent = trainer.make(algorithm, "ALE/Pong-v5", seed=0, device="cuda", preset="auto", **settings)
    buffer = agent.new_buffer(4, 2)
    assert buffer.obs_on_device and buffer.obs.device.type == "cuda" and buffer.obs.dtype == torch.uint8
    sink = ListSink()
    agent.learn(64, sink=sink, eval_episodes=0, log_interval=32)
    losses = [event["values"]["train/loss"] for event in sink.events if event["kind"] == "train"]
    assert losses and all(isinstance(loss, float) and np.isfinite(loss) for loss in losses)


def test_ppo_in_bfloat16_runs_its_image_encoder_in_bfloat16_and_its_heads_in_float32():
    agent = trainer.make("ppo", "ALE/Pong-v5", seed=0, device="cpu", preset="auto", precision="bfloat16", num_envs=2,
                         n_steps=8, batch_size=8, n_epochs=1)
    seen = []
    agent.network.encoder.cnn.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    images = torch.as_tensor(agent.observation_space.sample()[None])
    distribution, values = agent.network(images)
    assert seen == [torch.bfloat16] and values.dtype == distribution.logits.dtype == torch.float32
    before = [p.detach().clone() for p in agent.network.parameters()]
    agent.learn(32, eval_episodes=0)
    assert any(not torch.equal(p, q) for p, q in zip(before, agent.network.parameters()))
    float32 = trainer.make("ppo", "ALE/Pong-v5", seed=0, device="cpu", preset="auto")
    assert not float32.network.bfloat16_encoder  # float32 unless asked
