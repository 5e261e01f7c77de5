"""Normalised scores, so that tasks with different reward scales can be aggregated (rlweb.scores.aggregates).

- Atari: the human-normalised score, (score - random) / (human - random), from the random and human scores
  per game of data/atari_human_random.json.
- Other tasks: min-max, (score - low) / (high - low), where low is a uniformly random policy's mean score
  (data/random_scores.json, measured by rlweb.scores.measure_random) and high is the task's solved threshold
  in Gymnasium (data/gymnasium_reward_thresholds.json) or, for a task without one, the best final score in
  RL Zoo's benchmark table (data/rl_zoo_benchmark.json).

A task without reference scores has no normalised score (None); the pages say so instead of guessing.
"""

import functools
import json
import re
from pathlib import Path

DATA = Path(__file__).parent / "data"
ATARI_SUFFIXES = re.compile(r"(-ram)?(NoFrameskip|Deterministic)?(-ram)?$")


@functools.cache
def load(name: str) -> dict:
    """A data file of rlweb/scores/data, parsed (each names its source and licence)."""
    return json.loads((DATA / name).read_text())


def family(env_id: str) -> str:
    """The environment without its version and namespace: 'ALE/Pong-v5' -> 'Pong', 'Hopper-v5' -> 'Hopper'."""
    name = env_id.rsplit("/", 1)[-1]
    return re.sub(r"-v\d+$", "", name)


def atari_game(env_id: str) -> str | None:
    """The game in the Atari table for an ALE id ('ALE/BankHeist-v5', 'BankHeistNoFrameskip-v4' -> 'bank_heist')."""
    name = ATARI_SUFFIXES.sub("", family(env_id))
    game = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    if game in load("atari_human_random.json")["games"] and (env_id.startswith("ALE/") or "/" not in env_id):
        return game
    return None


def _same_family(table: dict, env_id: str):
    """The entry for env_id in a table keyed by env ids, else for another version of the same task (newest)."""
    if env_id in table:
        return env_id, table[env_id]
    versions = sorted((key for key in table if family(key) == family(env_id) and "/" not in key), reverse=True)
    return (versions[0], table[versions[0]]) if versions else (None, None)


@functools.cache
def reference(env_id: str) -> dict | None:
    """The reference scores that normalise env_id: {"kind", "low", "high", "low_label", "high_label", "sources"}."""
    game = atari_game(env_id)
    if game:
        table = load("atari_human_random.json")
        scores = table["games"][game]
        return {"kind": "human-normalised", "low": scores["random"], "high": scores["human"],
                "low_label": "random", "high_label": "human", "sources": [table["source"]]}
    randoms = load("random_scores.json")
    random_id, random_score = _same_family(randoms["scores"], env_id)
    if random_score is None:
        return None
    thresholds = load("gymnasium_reward_thresholds.json")
    threshold_id, threshold = _same_family(thresholds["thresholds"], env_id)
    if threshold is not None:
        high, high_label, high_source = threshold, f"solved threshold of {threshold_id}", thresholds["source"]
    else:
        zoo = load("rl_zoo_benchmark.json")
        best = max((row for row in zoo["results"] if family(row["env_id"]) == family(env_id)),
                   key=lambda row: row["mean"], default=None)
        if best is None:
            return None
        high = best["mean"]
        high_label = f"best RL Zoo score ({best['algorithm'].upper()} on {best['env_id']})"
        high_source = zoo["source"]
    low = random_score["mean"]
    if high <= low:
        return None
    return {"kind": "min-max", "low": low, "high": high, "low_label": f"random policy on {random_id}",
            "high_label": high_label, "sources": [randoms["source"], high_source]}


def normalise(env_id: str, score: float) -> float | None:
    """score on env_id as a normalised score (0: random, 1: human or the reference high), or None."""
    ref = reference(env_id)
    if ref is None or score is None:
        return None
    return (float(score) - ref["low"]) / (ref["high"] - ref["low"])
