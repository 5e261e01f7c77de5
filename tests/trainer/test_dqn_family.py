"""The DQN extensions: C51 projection, dueling, noisy layers, presets on every observation space."""

import copy

import numpy as np
import pytest
import torch

import trainer
from trainer.algorithms.dqn import PRESETS, DQNConfig, QNetwork, categorical_projection
from trainer.networks import NoisyLinear, reset_noise
from trainer.params import build_config

from tests.trainer import envs_for_tests  # noqa: F401

TINY = dict(learning_starts=32, batch_size=16, buffer_size=500, train_frequency=8, gradient_steps=2,
            hidden_layers="16,16")


def reference_projection(probabilities, reward, discount, support):
    """The textbook loop: clamp each shifted atom, split its mass between floor and ceil bins."""
    v_min, v_max, atoms = support[0], support[-1], len(support)
    delta = (v_max - v_min) / (atoms - 1)
    projected = np.zeros(atoms)
    for p, z in zip(probabilities, support):
        shifted = min(max(reward + discount * z, v_min), v_max)
        b = (shifted - v_min) / delta
        lower, upper = int(np.floor(b)), int(np.ceil(b))
        if lower == upper:
            projected[lower] += p
        else:
            projected[lower] += p * (upper - b)
            projected[upper] += p * (b - lower)
    return projected


@pytest.mark.parametrize("reward, discount", [
    (0.0, 1.0),  # every atom lands exactly on a bin
    (1.0, 1.0),  # shifted by exactly one bin
    (0.3, 0.9),
    (50.0, 0.99),  # everything beyond v_max
    (-50.0, 0.99),  # everything below v_min
    (2.0, 0.0),  # a terminal transition: all mass on the reward
])
def test_c51_projection_matches_the_textbook_loop(reward, discount):
    support = torch.linspace(-5, 5, 11)
    probabilities = torch.softmax(torch.randn(1, 11, generator=torch.Generator().manual_seed(0)), dim=1)
    projected = categorical_projection(probabilities, torch.tensor([reward]), torch.tensor([discount]), support)
    expected = reference_projection(probabilities[0].numpy(), reward, discount, support.numpy())
    assert np.allclose(projected[0].numpy(), expected, atol=1e-6)
    assert projected.sum().item() == pytest.approx(1.0, abs=1e-6)


def test_dueling_subtracts_the_mean_advantage_per_sample_not_per_batch():
    config = build_config(DQNConfig, {"dueling": True, "hidden_layers": "8"})
    from gymnasium import spaces

    network = QNetwork(spaces.Box(-1, 1, (3,)), 4, config)
    observations = torch.randn(5, 3)
    q = network(observations)
    features = network.body(network.encoder(observations))
    value, advantage = network.value(features), network.advantage(features)
    assert torch.allclose(q, value + advantage - advantage.mean(dim=1, keepdim=True), atol=1e-6)
    # one sample's Q-values do not depend on the rest of the batch
    assert torch.allclose(network(observations[:1]), q[:1], atol=1e-6)


def test_noisy_layers_resample_on_demand_and_evaluate_with_mean_weights():
    layer = NoisyLinear(4, 3, std_init=0.5, factorised=True)
    inputs = torch.randn(2, 4)
    first = layer(inputs)
    assert torch.equal(first, layer(inputs))  # the noise is fixed between resets
    reset_noise(layer)
    assert not torch.allclose(first, layer(inputs))
    layer.eval()
    mean = torch.nn.functional.linear(inputs, layer.weight_mu, layer.bias_mu)
    assert torch.equal(layer(inputs), mean)
    reset_noise(layer)
    assert torch.equal(layer(inputs), mean)
    names = {name for name, _ in layer.named_parameters()}
    assert not names & {"noise_in", "noise_out"} and {"noise_in", "noise_out"} <= dict(layer.named_buffers()).keys()
    # factorised noise is an outer product: rank one
    assert torch.linalg.matrix_rank(layer.weight_noise()).item() == 1


def test_independent_noise_is_not_factorised():
    layer = NoisyLinear(6, 5, std_init=0.017, factorised=False)
    assert torch.linalg.matrix_rank(layer.weight_noise()).item() > 1


@pytest.mark.parametrize("factorised", [True, False])
def test_a_noisy_layer_computes_the_noisy_weights_output_and_gradients(factorised):
    """Factorised noise is applied as two vectors, never as a matrix: the outputs and every gradient must
    be those of y = x (mu + sigma * noise)^T + (b_mu + b_sigma * e_b), the layer of the paper."""
    torch.manual_seed(0)
    layer = NoisyLinear(7, 5, std_init=0.5, factorised=factorised)
    with torch.no_grad():  # sigmas of different sizes, so that a misplaced vector shows
        layer.weight_sigma.uniform_(0.1, 1.0)
        layer.bias_sigma.uniform_(0.1, 1.0)
    inputs = torch.randn(3, 7, requires_grad=True)
    layer(inputs).square().sum().backward()
    ours = [inputs.grad.clone(), *(parameter.grad.clone() for parameter in layer.parameters())]
    inputs.grad = None
    layer.zero_grad()
    weight = layer.weight_mu + layer.weight_sigma * layer.weight_noise()
    expected = torch.nn.functional.linear(inputs, weight, layer.bias_mu + layer.bias_sigma * layer.bias_epsilon)
    assert torch.allclose(layer(inputs), expected, atol=1e-6)
    expected.square().sum().backward()
    theirs = [inputs.grad, *(parameter.grad for parameter in layer.parameters())]
    for our_gradient, their_gradient in zip(ours, theirs):
        assert torch.allclose(our_gradient, their_gradient, atol=1e-5)
    if factorised:  # the bias's noise is the output vector's
        assert torch.equal(layer.bias_epsilon, layer.noise_out)


def test_a_checkpoint_that_holds_factorised_noise_as_a_matrix_still_loads():
    """Checkpoints written before the noise was kept as vectors hold a `weight_epsilon` matrix: the weights
    load (strictly), the old noise is dropped, and the noise is drawn afresh as always."""
    layer = NoisyLinear(4, 3, factorised=True)
    old_state = {**layer.state_dict(), "weight_epsilon": torch.ones(3, 4)}
    fresh = NoisyLinear(4, 3, factorised=True)
    fresh.load_state_dict(old_state, strict=True)
    assert torch.equal(fresh.weight_mu, layer.weight_mu) and torch.equal(fresh.weight_sigma, layer.weight_sigma)
    assert "weight_epsilon" not in fresh.state_dict() and "noise_in" not in fresh.state_dict()


def test_noisy_dqn_does_not_use_epsilon_and_acts_deterministically_in_evaluation():
    agent = trainer.make("noisy-dqn", "CartPole-v1", seed=0, **TINY)
    assert agent.epsilons[0](0.0) == 0.0
    observations = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    first = agent.act(observations, deterministic=True)
    reset_noise(agent.q_network)
    assert (first == agent.act(observations, deterministic=True)).all()


def test_vector_epsilon_is_log_spaced_over_the_envs():
    agent = trainer.make("dqn", "CartPole-v1", num_envs=4, exploration_final_eps=0.1,
                         exploration_final_eps_min=0.001, **TINY)
    finals = [epsilon(1.0) for epsilon in agent.epsilons]
    assert finals == pytest.approx(np.logspace(-3, -1, 4).tolist())
    assert np.allclose(np.diff(np.log(finals)), np.log(100) / 3)


def test_prioritized_beta_anneals_to_one_and_stays_there():
    agent = trainer.make("per-dqn", "CartPole-v1", **TINY)
    assert agent.beta(0.0) == pytest.approx(0.4)
    assert agent.beta(0.5) == pytest.approx(0.7)
    assert agent.beta(1.0) == agent.beta(1.5) == pytest.approx(1.0)


def test_polyak_target_updates_move_the_target_by_tau():
    agent = trainer.make("dqn", "CartPole-v1", tau=0.25, **TINY)
    with torch.no_grad():
        for parameter in agent.q_network.parameters():
            parameter.add_(1.0)
    before = [p.clone() for p in agent.target_network.parameters()]
    agent.update_target()
    for old, new, online in zip(before, agent.target_network.parameters(), agent.q_network.parameters()):
        assert torch.allclose(new, old + 0.25 * (online - old))


def test_replay_ratio_sets_updates_per_env_step():
    agent = trainer.make("dqn", "CartPole-v1", replay_ratio=0.25, num_envs=2, **TINY)
    counted = []
    original = agent.strategy.updates

    def counting(buffer, count, beta=1.0):
        counted.append(count)
        yield from original(buffer, count, beta)

    agent.strategy.updates = counting
    agent.learn(232)
    assert sum(counted) == (232 - 32) // 4


@pytest.mark.parametrize("algorithm", list(PRESETS))
@pytest.mark.parametrize("kind", ["box", "discrete", "multidiscrete", "multibinary"])
def test_every_preset_trains_saves_loads_and_evaluates_on_every_observation_space(algorithm, kind, tmp_path):
    agent = trainer.make(algorithm, f"rlweb-test/Corridor-{kind}-v0", seed=0, **TINY)
    summary = agent.learn(120, checkpoint_dir=tmp_path, eval_episodes=1)
    assert summary["status"] == "succeeded"
    loaded = trainer.load(tmp_path / "final.zip")
    assert loaded.name == algorithm
    observations = [agent.observation_space.sample() for _ in range(10)]
    assert [int(agent.predict(o)) for o in observations] == [int(loaded.predict(o)) for o in observations]


def test_rainbow_combines_every_extension():
    config = trainer.make("rainbow", "CartPole-v1", **TINY).config
    assert (config.double_q, config.dueling, config.noisy, config.n_step_return, config.prioritized_replay,
            config.categorical, config.priority_alpha) == (True, True, True, 3, True, True, 0.5)


def test_pong_steps_the_real_atari_env_through_the_cnn(tmp_path):
    agent = trainer.make("dqn", "ALE/Pong-v5", seed=0, learning_starts=32, batch_size=8, buffer_size=200,
                         train_frequency=32, gradient_steps=1, hidden_layers="")
    assert agent.observation_space.shape == (4, 84, 84)
    assert agent.learn(80, checkpoint_dir=tmp_path, eval_episodes=0)["steps"] == 80
    assert trainer.load(tmp_path / "final.zip").predict(agent.observation_space.sample()) in range(6)


@pytest.mark.parametrize("extra", [{}, {"categorical": True}, {"n_step_return": 3}])
def test_a_training_phase_with_shared_targets_equals_one_step_at_a_time(extra):
    agent, twin = (trainer.make("dqn", "CartPole-v1", seed=0, **{**TINY, **extra}) for _ in range(2))
    agent.learn(200)
    twin.learn(200)  # training is deterministic given the seed: the twin is in the same state
    for mine, theirs in zip(agent.q_network.parameters(), twin.q_network.parameters()):
        assert torch.equal(mine, theirs)
    list(agent.strategy.updates(agent.buffer, 5))  # the CPU strategy's shared targets
    indices = twin.buffer.sample_indices(5 * 16, twin.rng)
    for k in range(5):
        batch = twin.buffer.batch(indices[k * 16:(k + 1) * 16], twin.config.n_step_return, twin.config.gamma)
        twin.strategy.learn_from(batch, twin.targets(batch))
    for mine, theirs in zip(agent.q_network.parameters(), twin.q_network.parameters()):
        assert torch.allclose(mine, theirs, atol=1e-6)


def test_dqn_fills_replay_with_random_actions_also_when_epsilon_ends_before_learning_starts():
    # epsilon is at its end after 4 steps here; the warm-up must not be the untrained network's greedy choice
    agent = trainer.make("dqn", "CartPole-v1", seed=0, learning_starts=300, exploration_fraction=0.01,
                         batch_size=16, buffer_size=1000, train_frequency=256, gradient_steps=1)
    before = copy.deepcopy(agent.q_network)  # the network that acted during the warm-up: no update came before
    agent.learn(400, eval_episodes=0)
    warm_up = agent.buffer.actions[:300]
    with torch.no_grad():
        greedy = before(torch.as_tensor(agent.buffer.observations_at(np.arange(300)))).argmax(dim=1).numpy()
    assert 0.35 < (warm_up == greedy).mean() < 0.65  # a coin's agreement with it: 0.99 when epsilon (0.01) acted
    assert 0.4 < warm_up.mean() < 0.6


def test_noisy_dqn_fills_replay_with_random_actions_then_acts_on_fresh_noise_every_step():
    # seed 0 starts with one dominant action: before the fix it played only that action for 100k steps
    agent = trainer.make("noisy-dqn", "CartPole-v1", seed=0, learning_starts=200, batch_size=16, buffer_size=1000,
                         train_frequency=256, gradient_steps=1)
    layer = next(module for module in agent.q_network.modules() if isinstance(module, NoisyLinear))
    draws = []
    original = layer.reset_noise
    layer.reset_noise = lambda: draws.append(1) or original()
    agent.learn(400)
    warm_up = agent.buffer.actions[:200]
    assert 0.3 < warm_up.mean() < 0.7  # uniform random actions
    assert len(draws) >= 400  # one draw per env step (plus one per update)


@pytest.mark.parametrize("algorithm, hand_gradients, shared_targets, numpy_acting", [
    ("dqn", True, True, True),
    ("double-dqn", True, False, True),  # the online network's next actions change with every update
    ("per-dqn", True, False, True),  # so do the priorities
    ("dueling-dqn", False, True, False),  # not a plain stack of Linear layers: autograd, torch acting
    ("c51", False, True, False),
])
def test_the_cpu_strategy_takes_each_fast_part_only_where_it_applies(algorithm, hand_gradients, shared_targets,
                                                                     numpy_acting):
    from trainer.update_strategies import CPUDQN

    strategy = trainer.make(algorithm, "CartPole-v1", seed=0, device="cpu", **TINY).strategy
    assert isinstance(strategy, CPUDQN)
    assert (strategy.learn_from == strategy.hand_learn_from) is hand_gradients
    assert strategy.shared_targets is shared_targets
    assert (strategy.numpy_q_network is not None) is numpy_acting


def test_noisy_nets_and_switched_off_parts_train_through_the_plain_code():
    from trainer.update_strategies import PlainDQN, for_dqn

    for agent in (trainer.make("noisy-dqn", "CartPole-v1", seed=0, device="cpu", **TINY),
                  trainer.make("rainbow", "CartPole-v1", seed=0, device="cpu", **TINY)):
        assert type(agent.strategy) is PlainDQN
    agent = trainer.make("dqn", "CartPole-v1", seed=0, device="cpu", **TINY)
    assert type(for_dqn(agent, hand_gradients=False, shared_targets=False, numpy_acting=False)) is PlainDQN
