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


def test_a_training_process_reuses_the_memory_it_frees():
    """A CNN's update frees and allocates megabytes each pass; glibc handed them back to the OS, and every
    update paid about 2,000 page faults for fresh pages (trainer.agent.keep_freed_memory)."""
    import platform
    import resource

    import pytest

    from trainer.agent import keep_freed_memory

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's malloc only")
    keep_freed_memory()
    def a_pass():  # four 8 MB tensors alive at once, as in a backward pass, then freed
        return sum(float(torch.ones(2**21).sum()) for _ in [torch.ones(2**21) for _ in range(4)])

    a_pass()  # the heap grows once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        a_pass()  # 8,192 fresh pages a pass if the memory went back to the OS: 81,920 in all
    # the count is the whole process's: other threads left by earlier tests fault pages too (8,195 once in CI, a
    # flake at the old bound of 8,000), so the bound sits well between that noise and the 81,920 of the defect
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 30_000
