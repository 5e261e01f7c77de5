"""One module per algorithm family; importing this package registers them all."""

from trainer.algorithms import dqn  # noqa: F401
