"""Schedules as functions of training progress (0 at the start of the run, 1 at its end)."""

SCHEDULES = ("linear", "constant")  # the choices of a learning rate's (or clip range's) `*_schedule`


def annealed(value: float, schedule: str, progress: float) -> float:
    """`value` decayed linearly to 0 over the run, or kept constant."""
    return value * (1.0 - progress) if schedule == "linear" else value


def linear(start: float, end: float, fraction: float):
    """Goes from `start` to `end` over the first `fraction` of training, then stays at `end`."""

    def value(progress: float) -> float:
        if fraction <= 0:
            return end
        return start + (end - start) * min(1.0, max(0.0, progress) / fraction)

    return value


def crossed(before: int, after: int, interval: int) -> bool:
    """True when a step counter moving from `before` to `after` passed a multiple of `interval`."""
    return after // interval > before // interval
