"""The CPU speed paths of `trainer.cpu_speed` give the numbers of torch's general code."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from trainer.cpu_speed import (FlatAdam, FlatParameters, FlatRMSprop, NumpyMLP, clip_grad_norm, hand_paths_apply,
                               numpy_network, td_loss_gradients)
from trainer.networks import ObservationEncoder, mlp


@pytest.mark.parametrize("max_norm", [0.01, 0.5, 1e6])
def test_flat_gradient_clipping_is_torchs_clip_grad_norm(max_norm):
    generator = torch.Generator().manual_seed(0)
    layers = [torch.nn.Linear(5, 7), torch.nn.Linear(7, 3)]
    flats = [FlatParameters(layer.parameters()) for layer in layers]
    for flat in flats:
        flat.param.grad.copy_(torch.randn(flat.param.shape, generator=generator))
    reference = [flat.param.grad.clone().requires_grad_() for flat in flats]
    for tensor in reference:
        tensor.grad = tensor.detach().clone()
    expected_norm = torch.nn.utils.clip_grad_norm_(reference, max_norm)
    assert clip_grad_norm(flats, max_norm) == pytest.approx(float(expected_norm))
    for layer, flat, tensor in zip(layers, flats, reference):
        assert torch.allclose(flat.param.grad, tensor.grad)
        # the layers' own gradients are views of the clipped flat gradient
        assert torch.equal(layer.weight.grad.reshape(-1), flat.param.grad[:layer.weight.numel()])


@pytest.mark.parametrize("flat_class, torch_class, options, slot", [
    (FlatAdam, torch.optim.Adam, dict(eps=1e-5), "exp_avg_sq"),
    (FlatRMSprop, torch.optim.RMSprop, dict(alpha=0.9, eps=1e-5), "square_avg"),
])
def test_flat_optimizers_step_exactly_as_torchs_with_a_changing_learning_rate_and_saved_state(
        flat_class, torch_class, options, slot):
    torch.manual_seed(0)
    start = torch.randn(2, 50)
    ours = [torch.nn.Parameter(start[0].clone()), torch.nn.Parameter(start[1].clone())]
    theirs = [torch.nn.Parameter(start[0].clone()), torch.nn.Parameter(start[1].clone())]

    def groups(parameters):
        return [{"params": [parameters[0]], "lr": 0.01}, {"params": [parameters[1]], "lr": 0.02}]

    flat, reference = flat_class(groups(ours), **options), torch_class(groups(theirs), **options)
    for step in range(5):
        gradients = torch.randn(2, 50)
        for optimizer, parameters in ((flat, ours), (reference, theirs)):
            optimizer.param_groups[0]["lr"] = 0.01 / (step + 1)  # annealed, as PPO and A2C can
            for parameter, gradient in zip(parameters, gradients):
                parameter.grad = gradient.clone()
            optimizer.step()
    for mine, expected in zip(ours, theirs):
        torch.testing.assert_close(mine.detach(), expected.detach())
    state = flat.state_dict()
    assert float(state["state"][0]["step"]) == 5.0
    resumed = flat_class(groups(ours), **options)
    resumed.load_state_dict(state)
    torch.testing.assert_close(resumed.state[ours[1]][slot], reference.state[theirs[1]][slot])
    assert float(resumed.state[ours[0]]["step"]) == 5.0


def test_flat_adam_refuses_groups_of_several_tensors():
    with pytest.raises(ValueError, match="one flat tensor"):
        FlatAdam([torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))])


def test_numpy_mlp_gives_the_networks_outputs_and_follows_in_place_updates():
    torch.manual_seed(0)
    layers = [nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3)]
    network = nn.Sequential(*layers)
    FlatParameters(network.parameters())  # views of the flat tensor, as the algorithms build them
    numpy_mlp = NumpyMLP(layers)
    observations = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)

    def expected():
        with torch.no_grad():
            return network(torch.as_tensor(observations)).numpy()

    np.testing.assert_allclose(numpy_mlp(observations), expected(), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.add_(0.1)
    np.testing.assert_allclose(numpy_mlp(observations), expected(), rtol=1e-5, atol=1e-6)


def test_numpy_acting_is_only_for_flat_observations_without_normalisation_on_a_cpu():
    layers = list(mlp(4, (8,), 2))
    box, cpu = ObservationEncoder(gym.spaces.Box(-1, 1, (4,))), torch.device("cpu")
    assert numpy_network(cpu, box, layers) is not None
    assert numpy_network(cpu, box, layers, normalizes_observations=True) is None
    assert numpy_network(cpu, ObservationEncoder(gym.spaces.Discrete(4)), layers) is None
    assert numpy_network(cpu, box, list(mlp(4, (8,), 2, activation=nn.ELU))) is None
    assert numpy_network(torch.device("cuda"), box, layers) is None


@pytest.mark.parametrize("delta_clip, weighted", [(1.0, False), (1.0, True), (0.5, False), (0.0, True)])
def test_hand_written_td_gradients_equal_autograds(delta_clip, weighted):
    torch.manual_seed(0)
    network = mlp(4, (32, 16), 3)
    reference = copy.deepcopy(network)
    FlatParameters(network.parameters())  # gives every parameter a gradient to write into
    for parameter in network.parameters():
        parameter.grad.fill_(123.0)  # overwritten, not accumulated
    features, actions = torch.randn(20, 4), torch.randint(0, 3, (20,))
    targets = 3 * torch.randn(20)  # TD errors on both sides of the Huber threshold
    weights = torch.rand(20) if weighted else None
    per_sample, q = td_loss_gradients(list(network), features, actions, targets, weights, delta_clip)

    outputs = reference(features)[torch.arange(20), actions]
    expected = (F.huber_loss(outputs, targets, delta=delta_clip, reduction="none") if delta_clip
                else F.mse_loss(outputs, targets, reduction="none"))
    assert (expected.detach() > 0.5 * delta_clip ** 2).any() and (expected.detach() < 0.5 * delta_clip ** 2).any() \
        or not delta_clip
    (expected * weights if weighted else expected).mean().backward()
    torch.testing.assert_close(per_sample, expected.detach())
    torch.testing.assert_close(q, outputs.detach())
    for mine, theirs in zip(network.parameters(), reference.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad)


def test_the_hand_paths_apply_only_on_a_cpu_in_float32_to_plain_linear_networks():
    from trainer.networks import NoisyLinear

    box = ObservationEncoder(gym.spaces.Box(-1, 1, (4,)))
    layers = [box, *mlp(4, (8,), 2)]
    assert hand_paths_apply(torch.device("cpu"), torch.float32, layers)
    assert not hand_paths_apply(torch.device("cuda"), torch.float32, layers)  # on a GPU, autograd
    assert not hand_paths_apply("cpu", torch.bfloat16, layers)  # mixed precision
    assert not hand_paths_apply("cpu", torch.float32, [ObservationEncoder(gym.spaces.Discrete(4)), *layers[1:]])
    assert not hand_paths_apply("cpu", torch.float32, [box, *mlp(4, (8,), 2, linear=NoisyLinear)])
    assert not hand_paths_apply("cpu", torch.float32, [box, *mlp(4, (8,), 2, activation=nn.ELU)])
    assert not hand_paths_apply("cpu", torch.float32, [box, nn.Linear(4, 2, bias=False)])
    assert not hand_paths_apply("cpu", torch.float32, [box, *mlp(4, (8,), 2).double()])
    # DQN's hand-written gradients know ReLU only
    assert not hand_paths_apply("cpu", torch.float32, [box, *mlp(4, (8,), 2, activation=nn.Tanh)], (nn.ReLU,))


@pytest.mark.parametrize("weighted", [False, True])
def test_dqns_hand_path_takes_the_steps_of_its_autograd_loss(weighted):
    from types import SimpleNamespace

    import trainer

    agents = [trainer.make("dqn", "CartPole-v1", seed=0, hidden_layers="32,32", max_grad_norm=0.5) for _ in range(2)]
    hand_learn_from = agents[0].strategy.learn_from  # the CPU strategy's, chosen when the agent is built
    assert hand_learn_from == agents[0].strategy.hand_learn_from
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        batch = SimpleNamespace(obs=torch.randn(16, 4, generator=generator),
                                actions=torch.randint(0, 2, (16,), generator=generator),
                                weights=torch.rand(16, generator=generator) if weighted else None)
        target = 3 * torch.randn(16, generator=generator)
        hand, autograd = hand_learn_from(batch, target), agents[1].learn_from(batch, target)  # dqn.py's
        torch.testing.assert_close(hand["train/loss"], autograd["train/loss"])
        torch.testing.assert_close(hand["train/q_mean"], autograd["train/q_mean"])
        torch.testing.assert_close(agents[0].q_flat.param, agents[1].q_flat.param)
