"""Scores across tasks: normalisation (normalise.py) and the aggregates with their intervals (aggregates.py: numpy,
scipy and rliable, imported only where they are computed, not by the web process at its start)."""

METRICS = ("iqm", "median", "mean", "optimality_gap")  # the aggregates, in the order aggregates.py gives them
