"""Each action distribution's log-prob, entropy and samples against torch.distributions."""

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import distributions as D

from trainer.distributions import Bernoulli, Categorical, DiagonalGaussian, MultiCategorical, policy_head


def test_categorical_matches_torch():
    logits = torch.randn(6, 4)
    ours, reference = Categorical(logits), D.Categorical(logits=logits)
    actions = torch.tensor([0, 1, 2, 3, 1, 0])
    torch.testing.assert_close(ours.log_prob(actions), reference.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), reference.entropy())
    assert ours.mode().tolist() == logits.argmax(-1).tolist()


def test_categorical_samples_follow_the_probabilities():
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]])).expand(20_000, 3)
    counts = torch.bincount(Categorical(logits).sample(), minlength=3).float() / 20_000
    torch.testing.assert_close(counts, torch.tensor([0.1, 0.6, 0.3]), atol=0.015, rtol=0)


def test_multi_categorical_matches_a_product_of_torch_categoricals():
    nvec = [2, 3, 4]
    logits = torch.randn(5, sum(nvec))
    ours = MultiCategorical(logits, nvec)
    parts = [D.Categorical(logits=chunk) for chunk in torch.split(logits, nvec, dim=-1)]
    actions = torch.stack([p.sample() for p in parts], dim=-1)
    torch.testing.assert_close(ours.log_prob(actions), sum(p.log_prob(actions[:, i]) for i, p in enumerate(parts)))
    torch.testing.assert_close(ours.entropy(), sum(p.entropy() for p in parts))
    sample = ours.sample()
    assert sample.shape == (5, 3) and all((sample[:, i] < n).all() for i, n in enumerate(nvec))


def test_bernoulli_matches_torch():
    logits = torch.randn(7, 3) * 3
    ours, reference = Bernoulli(logits), D.Bernoulli(logits=logits)
    actions = reference.sample()
    torch.testing.assert_close(ours.log_prob(actions), reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(ours.entropy(), reference.entropy().sum(-1))
    assert ((ours.mode() == 1) == (logits > 0)).all()


def test_diagonal_gaussian_matches_torch_with_state_independent_log_std():
    mean = torch.randn(8, 2)
    log_std = torch.tensor([-0.5, 0.7])
    ours = DiagonalGaussian(mean, log_std)
    reference = D.Independent(D.Normal(mean, log_std.exp()), 1)
    actions = reference.sample() * 3  # far outside the usual range too
    torch.testing.assert_close(ours.log_prob(actions), reference.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), reference.entropy())
    torch.testing.assert_close(ours.mode(), mean)


def test_gaussian_head_clips_for_the_env_but_keeps_the_unclipped_sample_for_the_log_prob():
    space = spaces.Box(-1.0, 2.0, shape=(2,), dtype=np.float32)
    head = policy_head(space, 3, log_std_init=1.0)
    torch.manual_seed(0)
    distribution = head(torch.randn(100, 3))
    actions = distribution.sample()
    env_actions = head.to_env(actions.numpy())
    assert (env_actions >= -1).all() and (env_actions <= 2).all()
    assert ((actions.numpy() < -1) | (actions.numpy() > 2)).any()  # the clipping did something
    reference = D.Independent(D.Normal(distribution.mean, distribution.log_std.exp()), 1)
    torch.testing.assert_close(distribution.log_prob(actions), reference.log_prob(actions))


@pytest.mark.parametrize("space, expected", [
    (spaces.Discrete(3, start=5), lambda a: 5 <= a <= 7),
    (spaces.MultiDiscrete([[2, 3]], start=[[1, 1]]), lambda a: a.shape == (1, 2) and (a >= 1).all()),
    (spaces.MultiBinary(4), lambda a: a.shape == (4,) and set(np.unique(a)) <= {0, 1}),
])
def test_heads_turn_samples_into_actions_the_env_accepts(space, expected):
    head = policy_head(space, 5)
    actions = head.to_env(head(torch.randn(10, 5)).sample().numpy())
    for action in actions:
        assert space.contains(action) and expected(action)


def test_gradients_flow_through_log_prob_and_entropy():
    space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    head = policy_head(space, 3)
    distribution = head(torch.randn(4, 3))
    (distribution.log_prob(torch.zeros(4, 2)).sum() + distribution.entropy().sum()).backward()
    assert head.log_std.grad is not None and head.linear.weight.grad is not None
