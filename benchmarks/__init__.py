"""Benchmarks: sample efficiency and speed against stable-baselines3 on the same machine.

Run `python -m benchmarks` (all) or `python -m benchmarks dqn ...`; each module has a `main(argv)`.
"""
