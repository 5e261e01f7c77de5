import torch

from trainer.optimizers import RMSpropTFLike


def test_rmsprop_tf_like_puts_epsilon_inside_the_root_and_starts_the_average_at_one():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    optimizer = RMSpropTFLike([p], lr=0.1, alpha=0.9, eps=0.5)
    p.grad = torch.tensor([2.0, 0.0])
    optimizer.step()
    square_avg = 0.9 * 1.0 + 0.1 * torch.tensor([4.0, 0.0])
    expected = torch.tensor([1.0, -2.0]) - 0.1 * torch.tensor([2.0, 0.0]) / torch.sqrt(square_avg + 0.5)
    torch.testing.assert_close(p.detach(), expected)
