import pytest
import torch

from trainer.optimizers import FlatAdam, FlatRMSprop, RMSpropTFLike


def test_rmsprop_tf_like_puts_epsilon_inside_the_root_and_starts_the_average_at_one():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    optimizer = RMSpropTFLike([p], lr=0.1, alpha=0.9, eps=0.5)
    p.grad = torch.tensor([2.0, 0.0])
    optimizer.step()
    square_avg = 0.9 * 1.0 + 0.1 * torch.tensor([4.0, 0.0])
    expected = torch.tensor([1.0, -2.0]) - 0.1 * torch.tensor([2.0, 0.0]) / torch.sqrt(square_avg + 0.5)
    torch.testing.assert_close(p.detach(), expected)


def test_flat_adam_steps_exactly_as_torchs_adam_with_a_changing_learning_rate_and_saved_state():
    torch.manual_seed(0)
    start = torch.randn(2, 50)
    ours = [torch.nn.Parameter(start[0].clone()), torch.nn.Parameter(start[1].clone())]
    theirs = [torch.nn.Parameter(start[0].clone()), torch.nn.Parameter(start[1].clone())]
    flat_adam = FlatAdam([{"params": [ours[0]], "lr": 0.01}, {"params": [ours[1]], "lr": 0.02}], eps=1e-5)
    adam = torch.optim.Adam([{"params": [theirs[0]], "lr": 0.01}, {"params": [theirs[1]], "lr": 0.02}], eps=1e-5)
    for step in range(5):
        gradients = torch.randn(2, 50)
        for optimizer, parameters in ((flat_adam, ours), (adam, theirs)):
            optimizer.param_groups[0]["lr"] = 0.01 / (step + 1)  # annealed, as PPO does
            for parameter, gradient in zip(parameters, gradients):
                parameter.grad = gradient.clone()
            optimizer.step()
    for mine, reference in zip(ours, theirs):
        torch.testing.assert_close(mine.detach(), reference.detach())
    state = flat_adam.state_dict()
    assert float(state["state"][0]["step"]) == 5.0
    resumed = FlatAdam([{"params": [ours[0]], "lr": 0.01}, {"params": [ours[1]], "lr": 0.02}], eps=1e-5)
    resumed.load_state_dict(state)
    torch.testing.assert_close(resumed.state[ours[1]]["exp_avg_sq"], adam.state[theirs[1]]["exp_avg_sq"])


def test_flat_adam_refuses_groups_of_several_tensors():
    with pytest.raises(ValueError, match="one flat tensor"):
        FlatAdam([torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))])


def test_flat_rmsprop_steps_exactly_as_torchs_rmsprop_with_a_changing_learning_rate_and_saved_state():
    torch.manual_seed(0)
    start = torch.randn(2, 50)
    ours = [torch.nn.Parameter(start[0].clone()), torch.nn.Parameter(start[1].clone())]
    theirs = [torch.nn.Parameter(start[0].clone()), torch.nn.Parameter(start[1].clone())]
    flat = FlatRMSprop([{"params": [ours[0]], "lr": 0.01}, {"params": [ours[1]], "lr": 0.02}], alpha=0.9, eps=1e-5)
    reference = torch.optim.RMSprop([{"params": [theirs[0]], "lr": 0.01}, {"params": [theirs[1]], "lr": 0.02}],
                                    alpha=0.9, eps=1e-5)
    for step in range(5):
        gradients = torch.randn(2, 50)
        for optimizer, parameters in ((flat, ours), (reference, theirs)):
            optimizer.param_groups[0]["lr"] = 0.01 / (step + 1)  # annealed, as A2C can
            for parameter, gradient in zip(parameters, gradients):
                parameter.grad = gradient.clone()
            optimizer.step()
    for mine, expected in zip(ours, theirs):
        torch.testing.assert_close(mine.detach(), expected.detach())
    resumed = FlatRMSprop([{"params": [ours[0]], "lr": 0.01}, {"params": [ours[1]], "lr": 0.02}], alpha=0.9, eps=1e-5)
    resumed.load_state_dict(flat.state_dict())
    torch.testing.assert_close(resumed.state[ours[1]]["square_avg"], reference.state[theirs[1]]["square_avg"])
    assert float(resumed.state[ours[0]]["step"]) == 5.0
