"""SAC, DDPG and TD3: the squashed log-prob, entropy tuning, target smoothing, delayed updates, spaces."""

import importlib.util
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

import trainer
from trainer.algorithms.ddpg import smoothed_target_actions
from trainer.algorithms.sac import squashed_gaussian_log_prob
from trainer.buffers import ReplayBuffer
from trainer.continuous import ActionScaler, QEnsemble
from trainer.events import ListSink

TINY = {
    "sac": dict(hidden_layers="32,32", batch_size=32, learning_starts=100, buffer_size=5000),
    "ddpg": dict(hidden_layers="32,32", batch_size=32, learning_starts=100, buffer_size=5000),
    "td3": dict(hidden_layers="32,32", batch_size=32, learning_starts=100, buffer_size=5000),
}


@pytest.mark.parametrize("scale", [1.0, 2.0, 0.5])
def test_squashed_log_prob_matches_the_change_of_variables_reference(scale):
    torch.manual_seed(0)
    mean, log_std = torch.randn(1000, 3), torch.randn(1000, 3).clamp(-2, 1)
    u = mean + log_std.exp() * torch.randn(1000, 3)
    reference = TransformedDistribution(Normal(mean, log_std.exp()),
                                        [TanhTransform(), AffineTransform(0.0, scale)])
    # the reference inverts a = scale tanh(u), which loses precision near +-1: compare where it is exact
    a = scale * torch.tanh(u)
    inside = (torch.tanh(u).abs() < 0.999).all(dim=1)
    expected = reference.log_prob(a).sum(-1)
    ours = squashed_gaussian_log_prob(u, mean, log_std, scale)
    assert torch.allclose(ours[inside], expected[inside], atol=1e-3)
    assert torch.isfinite(squashed_gaussian_log_prob(torch.tensor([[30.0, -30.0, 0.0]]), torch.zeros(1, 3),
                                                     torch.zeros(1, 3))).all()  # no NaN where tanh saturates


def test_squashed_log_prob_matches_a_monte_carlo_histogram_with_bounds_of_two():
    torch.manual_seed(1)
    mean, log_std, scale = torch.tensor([0.3]), torch.tensor([-0.5]), 2.0
    samples = scale * torch.tanh(mean + log_std.exp() * torch.randn(400_000, 1))
    edges = torch.linspace(-1.8, 1.8, 37)
    counts = torch.histc(samples, bins=36, min=-1.8, max=1.8)
    empirical = counts / (len(samples) * (edges[1] - edges[0]))
    centres = (edges[:-1] + edges[1:]) / 2
    u = torch.atanh(centres / scale).unsqueeze(1)
    density = squashed_gaussian_log_prob(u, mean.expand(36, 1), log_std.expand(36, 1), scale).exp()
    assert torch.allclose(density, empirical, rtol=0.05, atol=0.01)
    # and it integrates to one over [-scale, scale]
    grid = torch.linspace(-scale + 1e-4, scale - 1e-4, 20001)
    full = squashed_gaussian_log_prob(torch.atanh(grid / scale).unsqueeze(1), mean.expand(20001, 1),
                                      log_std.expand(20001, 1), scale).exp()
    assert torch.trapezoid(full, grid).item() == pytest.approx(1.0, abs=2e-3)


def random_buffer(agent, size=512):
    buffer = ReplayBuffer(size, agent.observation_space.shape, np.float32,
                          action_shape=agent.action_space.shape, action_dtype=np.float32)
    rng = np.random.default_rng(0)
    buffer.add(rng.standard_normal((size, *agent.observation_space.shape)),
               rng.uniform(-1, 1, (size, *agent.action_space.shape)), rng.standard_normal(size),
               rng.standard_normal((size, *agent.observation_space.shape)), np.zeros(size))
    return buffer


def flat_gradient(loss: torch.Tensor, module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(module.parameters()))])


@pytest.mark.parametrize("settings", [{}, dict(auto_alpha=False, alpha=0.2)])
def test_sacs_actor_learns_against_the_critics_after_their_step(settings):
    """Haarnoja et al.'s order, as stable-baselines3 and CleanRL take it: the critics step first, and the
    actor's gradient is its loss's through the updated critics, not through those the update began with."""
    agent = trainer.make("sac", "Pendulum-v1", seed=0, **{**TINY["sac"], **settings})
    buffer = random_buffer(agent)
    for _ in range(3):  # move away from the initial parameters
        agent.update(buffer.sample(64, agent.rng))
    batch = buffer.sample(64, agent.rng)
    actor_before, critic_before = agent.actor_flat.param.detach().clone(), agent.critic_flat.param.detach().clone()
    alpha = agent.log_alpha.value.detach().exp()
    torch.manual_seed(5)
    metrics = agent.update(batch)
    gradient, critic_after = agent.actor_flat.param.grad.clone(), agent.critic_flat.param.detach().clone()
    assert not torch.equal(critic_after, critic_before)

    def actor_loss_with(critic_weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            agent.actor_flat.param.copy_(actor_before)
            agent.critic_flat.param.copy_(critic_weights)
        torch.manual_seed(5)
        agent.targets(batch, batch.next_obs, alpha)  # the critic step's draws, so the actor's are the same
        actions, log_prob = agent.actor.sample(batch.obs)
        return (alpha * log_prob - agent.critic(batch.obs, actions).min(dim=0).values).mean(), log_prob

    loss, log_prob = actor_loss_with(critic_after)
    assert float(metrics["train/actor_loss"]) == pytest.approx(loss.item(), rel=1e-5)
    torch.testing.assert_close(gradient, flat_gradient(loss, agent.actor), rtol=1e-4, atol=1e-6)
    stale, _ = actor_loss_with(critic_before)
    assert not torch.allclose(gradient, flat_gradient(stale, agent.actor), rtol=1e-3, atol=1e-5)
    if agent.config.auto_alpha:  # alpha's loss, -mean(log(alpha) (log pi + target entropy)), on the same draws
        expected = -(log_prob.detach() + agent.target_entropy).mean()
        torch.testing.assert_close(agent.log_alpha.value.grad, expected, rtol=1e-5, atol=1e-7)
    else:
        assert agent.log_alpha.value.grad is None


@pytest.mark.parametrize("algorithm", ["td3", "ddpg"])
def test_td3_and_ddpgs_actor_learns_against_the_critics_after_their_step(algorithm):
    """Fujimoto et al.'s order, as stable-baselines3 and CleanRL take it: the critics step first, and on a
    policy update the actor's gradient is that of -Q_1(s, mu(s)) through the updated first critic."""
    agent = trainer.make(algorithm, "Pendulum-v1", seed=0, **TINY[algorithm])
    buffer = random_buffer(agent)
    for _ in range(3):  # td3: the fourth update is a policy update
        agent.update(buffer.sample(64, agent.rng))
    batch = buffer.sample(64, agent.rng)
    actor_before, critic_before = agent.actor_flat.param.detach().clone(), agent.critic_flat.param.detach().clone()
    actor_updates = agent.actor_updates
    metrics = agent.update(batch)
    assert agent.actor_updates == actor_updates + 1
    gradient, critic_after = agent.actor_flat.param.grad.clone(), agent.critic_flat.param.detach().clone()
    assert not torch.equal(critic_after, critic_before)

    def actor_loss_with(critic_weights: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            agent.actor_flat.param.copy_(actor_before)
            agent.critic_flat.param.copy_(critic_weights)
        return -agent.critic(batch.obs, agent.actor(batch.obs))[0].mean()

    loss = actor_loss_with(critic_after)
    assert float(metrics["train/actor_loss"]) == pytest.approx(loss.item(), rel=1e-5)
    torch.testing.assert_close(gradient, flat_gradient(loss, agent.actor), rtol=1e-4, atol=1e-6)
    assert not torch.allclose(gradient, flat_gradient(actor_loss_with(critic_before), agent.actor), rtol=1e-3,
                              atol=1e-5)


def test_td3s_actor_sits_out_the_critic_only_updates():
    """Between delayed policy updates only the critics step: the actor, its optimizer's moments and step
    count and the target networks stay as they were."""
    agent = trainer.make("td3", "MountainCarContinuous-v0", seed=0, **TINY["td3"])
    buffer = random_buffer(agent)
    actor, critic = agent.actor_flat.param, agent.critic_flat.param

    def actor_side():
        state = agent.actor_optimizer.state[actor]
        return [actor.clone(), state["exp_avg"].clone(), state["step"].clone(),
                *(flat.param.clone() for flat in agent.target_flats)]

    for _ in range(2):  # a critic-only update, then one with the actor
        agent.update(buffer.sample(64, agent.rng))
    before, critic_before = actor_side(), critic.clone()
    agent.update(buffer.sample(64, agent.rng))  # critic-only (delay_policy_update 2)
    assert agent.critic_updates == 3 and agent.actor_updates == 1
    assert not torch.equal(critic, critic_before)
    assert all(torch.equal(old, new) for old, new in zip(before, actor_side()))
    assert float(before[2]) == 1.0
    agent.update(buffer.sample(64, agent.rng))  # with the actor: it moves, and so do the targets
    after = actor_side()
    assert not torch.equal(after[0], before[0]) and not torch.equal(after[3], before[3])


@pytest.mark.parametrize("algorithm", ["sac", "td3", "ddpg"])
def test_the_autograd_path_in_bfloat16_trains(algorithm):
    """bfloat16 (and any GPU) takes batched critic products instead of the hand-written critic pass."""
    agent = trainer.make(algorithm, "Pendulum-v1", seed=0, precision="bfloat16", **TINY[algorithm])
    sink = ListSink()
    before = [p.detach().clone() for p in agent.critic.parameters()]
    agent.learn(300, sink=sink, eval_episodes=1)
    losses = [e["values"]["train/critic_loss"] for e in sink.events if "train/critic_loss" in e.get("values", {})]
    assert losses and all(math.isfinite(loss) for loss in losses)
    assert not all(torch.equal(a, b) for a, b in zip(before, agent.critic.parameters()))


@pytest.mark.parametrize("target_entropy, direction", [("5", 1), ("-20", -1)])
def test_entropy_tuning_raises_alpha_below_the_target_entropy_and_lowers_it_above(target_entropy, direction):
    agent = trainer.make("sac", "Pendulum-v1", seed=0, target_entropy=target_entropy, alpha=0.5, **TINY["sac"])
    buffer = random_buffer(agent)
    alphas = [agent.update(buffer.sample(32, agent.rng))["train/alpha"].item() for _ in range(30)]
    assert alphas[0] == pytest.approx(0.5)
    assert np.sign(alphas[-1] - alphas[0]) == direction
    assert all(np.sign(b - a) in (0, direction) for a, b in zip(alphas, alphas[1:]))


def test_a_fixed_alpha_stays_fixed():
    agent = trainer.make("sac", "Pendulum-v1", seed=0, auto_alpha=False, alpha=0.2, **TINY["sac"])
    buffer = random_buffer(agent)
    for _ in range(5):
        metrics = agent.update(buffer.sample(32, agent.rng))
    assert metrics["train/alpha"].item() == pytest.approx(0.2)


def test_target_smoothing_noise_is_per_sample_clipped_and_clamped_to_the_bounds():
    torch.manual_seed(0)
    actions = torch.zeros(10_000, 2)
    smoothed = smoothed_target_actions(actions, noise=0.2, noise_clip=0.5)
    assert smoothed.std(dim=0).min() > 0.15  # drawn for every sample and dimension, not once per batch
    assert len(torch.unique(smoothed[:, 0])) > 9_000
    assert smoothed.abs().max() <= 0.5 + 1e-6  # clipped noise
    edge = smoothed_target_actions(torch.ones(10_000, 2), noise=0.2, noise_clip=0.5)
    assert edge.max() <= 1.0 and edge.min() >= 0.5  # clamped to the bounds after the noise
    # in env units the noise scales with each dimension's range (Pendulum: +-2, so std about 0.4)
    scaler = ActionScaler(trainer.make("td3", "Pendulum-v1", **TINY["td3"]).action_space)
    env_noise = scaler.to_env(smoothed[:, :1].numpy()) - scaler.to_env(np.zeros((10_000, 1)))
    assert np.std(env_noise) == pytest.approx(2 * smoothed[:, 0].std().item(), rel=1e-3)
    assert 0.3 < np.std(env_noise) < 0.45


def test_td3_updates_the_actor_and_targets_every_second_critic_update():
    agent = trainer.make("td3", "Pendulum-v1", seed=0, **TINY["td3"])
    assert agent.config.twin_q and agent.config.delay_policy_update == 2 and agent.config.target_noise == 0.2
    buffer = random_buffer(agent)
    actor_before = [p.detach().clone() for p in agent.actor.parameters()]
    target_before = [p.detach().clone() for p in agent.target_critic.parameters()]
    agent.update(buffer.sample(32, agent.rng))  # first critic update: no actor or target update
    assert all(torch.equal(a, b) for a, b in zip(actor_before, agent.actor.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(target_before, agent.target_critic.parameters()))
    agent.update(buffer.sample(32, agent.rng))
    assert not all(torch.equal(a, b) for a, b in zip(actor_before, agent.actor.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(target_before, agent.target_critic.parameters()))
    for _ in range(8):
        agent.update(buffer.sample(32, agent.rng))
    assert (agent.critic_updates, agent.actor_updates) == (10, 5)


def test_ddpg_has_one_critic_no_smoothing_and_updates_the_actor_every_time():
    agent = trainer.make("ddpg", "Pendulum-v1", seed=0, **TINY["ddpg"])
    assert agent.critic.num_q == 1 and agent.config.target_noise == 0
    buffer = random_buffer(agent)
    for _ in range(4):
        agent.update(buffer.sample(32, agent.rng))
    assert (agent.critic_updates, agent.actor_updates) == (4, 4)


def test_ddpgs_learning_rate_annealing_lowers_both_optimizers_rates():
    agent = trainer.make("ddpg", "Pendulum-v1", seed=0, lr_schedule="linear", policy_learning_rate=2e-3,
                         critic_learning_rate=1e-3, **TINY["ddpg"])
    agent.learn(300, eval_episodes=0)
    actor_rate = agent.actor_optimizer.param_groups[0]["lr"]
    critic_rate = agent.critic_optimizer.param_groups[0]["lr"]
    assert critic_rate < 1e-3 / 100 and actor_rate == pytest.approx(2 * critic_rate, abs=1e-12)  # annealed to 0


def _batched_critics(critics: QEnsemble, observations, actions, members):
    """The first `members` critics as batched matrix products, one per layer."""
    x = torch.cat([observations, actions], dim=1).unsqueeze(0).expand(members, -1, -1)
    for depth, layer in enumerate(critics.layers):
        x = torch.baddbmm(layer.bias[:members], x, layer.weight[:members])
        x = torch.relu(x) if depth < len(critics.layers) - 1 else x
    return x.squeeze(-1)


@pytest.mark.parametrize("members", [2, 1])
@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("loss", ["squared", "min"])
def test_each_critic_of_an_ensemble_gives_the_values_and_gradients_of_its_own_network(members, frozen, loss):
    torch.manual_seed(0)
    critics = QEnsemble(gym.spaces.Box(-1, 1, (3,)), 2, (32, 16), num_q=2)
    critics.requires_grad_(not frozen)
    observations, targets, action_values = torch.randn(64, 3), torch.randn(64), torch.randn(64, 2)
    results = []
    for forward in (critics, lambda o, a, m: _batched_critics(critics, o, a, m)):
        actions = action_values.clone().requires_grad_()
        critics.zero_grad(set_to_none=True)
        q = forward(observations, actions, members)
        assert q.shape == (members, 64)
        (((q - targets) ** 2).mean(dim=1).sum() if loss == "squared" else -q.min(dim=0).values.mean()).backward()
        results.append([q.detach(), actions.grad] + [p.grad for p in critics.parameters()])
    ours, reference = results
    for a, b in zip(ours, reference):
        if b is None:
            assert a is None or not a.any()
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    gradients = ours[2:]
    if frozen:  # the actor's loss through frozen critics: only the actions get a gradient
        assert all(g is None for g in gradients)
    else:  # members left out get zero gradients
        assert all(g is not None and not g[members:].any() for g in gradients)


@pytest.mark.parametrize("algorithm", ["sac", "ddpg", "td3"])
def test_it_refuses_discrete_actions_with_a_clear_message(algorithm):
    with pytest.raises(trainer.ConfigError) as error:
        trainer.validate(algorithm, "CartPole-v1", {})
    assert "needs Box actions" in error.value.errors["env_id"]


def test_actions_are_rescaled_from_unit_range_to_the_env_bounds():
    from gymnasium import spaces

    scaler = ActionScaler(spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32)))
    unit = np.array([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0], [5.0, -5.0]])
    assert scaler.to_env(unit).tolist() == [[-2, 0], [0, 5], [2, 10], [2, 0]]
    assert np.allclose(scaler.from_env(scaler.to_env(unit[:3])), unit[:3])


@pytest.mark.parametrize("algorithm", ["sac", "ddpg", "td3"])
def test_it_trains_saves_loads_with_the_same_actions_and_evaluates(algorithm, tmp_path):
    agent = trainer.make(algorithm, "Pendulum-v1", seed=1, **TINY[algorithm])
    summary = agent.learn(300, checkpoint_dir=tmp_path, eval_episodes=1)
    assert summary["status"] == "succeeded" and summary["steps"] == 300
    loaded = trainer.load(tmp_path / "final.zip")
    observations = np.stack([agent.observation_space.sample() for _ in range(20)])
    assert np.array_equal(agent.act(observations, True), loaded.act(observations, True))
    assert loaded.steps_done == 300 and np.isfinite(loaded.evaluate(1)["mean"])


def test_normalisation_statistics_round_trip_through_the_checkpoint(tmp_path):
    agent = trainer.make("td3", "Pendulum-v1", seed=0, normalize_observations=True, normalize_rewards=True,
                         **TINY["td3"])
    agent.learn(200, checkpoint_dir=tmp_path, eval_episodes=0)
    loaded = trainer.load(tmp_path / "final.zip")
    assert loaded.normalizers.state() == agent.normalizers.state()
    assert agent.normalizers.obs_stats.count > 100
    observations = np.stack([agent.observation_space.sample() for _ in range(10)])
    assert np.array_equal(agent.act(observations, True), loaded.act(observations, True))


@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_the_same_seed_gives_identical_metrics(algorithm):
    def metrics():
        sink = ListSink()
        trainer.make(algorithm, "Pendulum-v1", seed=3, **TINY[algorithm]).learn(300, sink=sink, eval_episodes=1,
                                                                                log_interval=100)
        return [(e["kind"], e["step"], e["values"]) for e in sink.events if e["kind"] not in ("time", "finished")]

    first, second = metrics(), metrics()
    assert first == second
    assert any(kind == "train" and "train/critic_loss" in values for kind, _, values in first)


def test_sac_reports_alpha_entropy_and_both_losses():
    sink = ListSink()
    trainer.make("sac", "Pendulum-v1", seed=0, **TINY["sac"]).learn(300, sink=sink, eval_episodes=0,
                                                                       log_interval=100)
    keys = set().union(*(e["values"] for e in sink.of_kind("train")))
    assert {"train/actor_loss", "train/critic_loss", "train/alpha", "train/entropy"} <= keys


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None,
                    reason="gymnasium[mujoco] is not installed (pip install 'gymnasium[mujoco]==1.4.0')")
@pytest.mark.parametrize("algorithm", ["sac", "td3"])
def test_it_trains_a_few_thousand_steps_on_a_mujoco_task(algorithm):
    agent = trainer.make(algorithm, "HalfCheetah-v5", seed=0, hidden_layers="32,32", batch_size=32,
                         learning_starts=1000, train_frequency=4, normalize_observations=True,
                         gradient_steps=1)
    summary = agent.learn(2000, eval_episodes=0)
    assert summary["steps"] == 2000
    assert agent.action_space.shape == (6,) and len(agent.buffer) == 2000
    assert math.isfinite(agent.evaluate(1)["mean"])


@pytest.mark.parametrize("exponent", [0.0, 1.0, 2.0])
def test_coloured_noise_has_the_asked_spectrum_and_about_unit_variance(exponent):
    from trainer.continuous import powerlaw_noise

    noise = powerlaw_noise(exponent, (400, 1000), np.random.default_rng(0))
    power = (np.abs(np.fft.rfft(noise, axis=-1)) ** 2).mean(axis=0)
    frequencies = np.fft.rfftfreq(1000)
    slope = np.polyfit(np.log(frequencies[1:]), np.log(power[1:]), 1)[0]
    assert slope == pytest.approx(-exponent, abs=0.05)
    assert noise.var() == pytest.approx(1.0, abs=0.1 if exponent < 2 else 0.4)
    # neighbouring steps are correlated for pink and red noise, not for white
    correlation = np.corrcoef(noise[:, :-1].ravel(), noise[:, 1:].ravel())[0, 1]
    assert (abs(correlation) < 0.02) if exponent == 0 else (correlation > 0.3)


def test_coloured_noise_restarts_a_sequence_when_an_episode_ends_or_it_runs_out():
    from trainer.continuous import ColoredNoise

    noise = ColoredNoise(1.0, num_envs=2, size=3, length=5, rng=np.random.default_rng(0))
    first = [noise.sample() for _ in range(3)]
    assert first[0].shape == (2, 3) and first[0].dtype == np.float32
    noise.reset(0)
    assert noise.position.tolist() == [0, 3]
    for _ in range(4):
        noise.sample()  # env 1 runs out of its 5 steps and starts a new sequence
    assert noise.position.tolist() == [4, 2]


def test_sac_explores_with_pink_noise_when_asked():
    agent = trainer.make("sac", "Pendulum-v1", seed=0, noise_exponent=1.0, **TINY["sac"])
    assert agent.learn(300, eval_episodes=0)["steps"] == 300
    collected = agent.buffer.actions[100:300, 0]  # after the random warm-up
    # pink noise wanders: consecutive actions are far more alike than independent draws would be
    assert np.corrcoef(collected[:-1], collected[1:])[0, 1] > 0.5


@pytest.mark.parametrize("algorithm", ["sac", "ddpg", "td3"])
def test_the_shared_loop_acts_at_random_until_learning_starts_then_trains_every_train_frequency_steps(algorithm):
    agent = trainer.make(algorithm, "Pendulum-v1", seed=0, learning_starts=100, batch_size=16, hidden_layers="16",
                         train_frequency=5, gradient_steps=3)
    explored, updated = [], []
    exploring_actions, update = agent.exploring_actions, agent.update
    agent.exploring_actions = lambda observations: explored.append(agent.steps_done) or exploring_actions(observations)
    agent.update = lambda batch: updated.append((agent.steps_done, len(batch.obs))) or update(batch)
    agent.learn(200, eval_episodes=0)
    assert explored == list(range(100, 200))  # before: uniformly random actions
    assert updated == [(step, 16) for step in range(100, 201, 5) for _ in range(3)]
    stored = agent.buffer.actions[:len(agent.buffer)]
    assert stored.dtype == np.float32 and stored.min() >= -1.0 and stored.max() <= 1.0  # in [-1, 1], not env units

