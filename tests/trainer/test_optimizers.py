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


def test_training_flushes_denormals_and_puts_the_threads_setting_back_after():
    """An Adam moment that stops getting gradients shrinks into the denormal range, where x86 arithmetic
    is many times slower; `learn` flushes denormals to zero while it trains (trainer.agent.denormals_flushed)."""
    import trainer
    from trainer.agent import flushing_denormals
    from trainer.events import Sink

    class FlushProbe(Sink):
        def __init__(self):
            self.seen = []

        def emit(self, event):
            self.seen.append(flushing_denormals())

    moment = torch.tensor([1e-4])
    for _ in range(800):  # what Adam does to the first moment of a weight whose gradient is zero
        moment.mul_(0.9)
    assert 0 < moment.item() < 1.2e-38  # denormal

    agent = trainer.make("dqn", "CartPole-v1", seed=0, learning_starts=50, batch_size=16, buffer_size=500,
                         hidden_layers="16")
    try:
        for before in (False, True):
            torch.set_flush_denormal(before)
            probe = FlushProbe()
            agent.learn(150, sink=probe)
            assert probe.seen and all(probe.seen)
            assert flushing_denormals() == before
    finally:
        torch.set_flush_denormal(False)
