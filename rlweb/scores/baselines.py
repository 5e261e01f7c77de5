"""Published results to set a run beside: final scores per environment and algorithm, and learning curves.

- Final scores: RL Zoo's benchmark table (data/rl_zoo_benchmark.json), one trained agent per row, its mean and
  standard deviation over evaluation episodes, after `steps` agent steps.
- Learning curves: data/curves/*.json, each file one source's curves with its licence and its x axis
  (agent steps, or frames with the frames per agent step). Every curve comes back in agent steps, the unit
  of rlweb's own x axis; on Atari an agent step is 4 frames (trainer/envs.py, frame_skip=4).

A baseline matches a run when the algorithm has the same name and the environment is the same task: the
same Atari game (ALE/Pong-v5 and PongNoFrameskip-v4), or the same task at another version (LunarLander-v3 and
LunarLander-v2). The published id is returned with it, so a page can say what the number was measured on.
"""

import functools
import json

import numpy as np

from rlweb.scores.normalise import DATA, atari_game, family, load

FRAMES_PER_ATARI_STEP = 4


def same_task(env_id: str, published_env_id: str) -> bool:
    game = atari_game(env_id)
    if game or atari_game(published_env_id):
        return game is not None and game == atari_game(published_env_id)
    return family(env_id) == family(published_env_id)


def final_scores(env_id: str, algorithm: str | None = None) -> list[dict]:
    """RL Zoo's rows for this task (and algorithm), each with "source" and "published_env_id"."""
    zoo = load("rl_zoo_benchmark.json")
    rows = [row for row in zoo["results"] if same_task(env_id, row["env_id"])
            and (algorithm is None or row["algorithm"] == algorithm.lower())]
    exact = [row for row in rows if row["env_id"] == env_id]  # the same version first, where published
    rows = sorted(rows, key=lambda row: (row not in exact, row["algorithm"]))
    return [{"label": f"RL Zoo {row['algorithm'].upper()}", "algorithm": row["algorithm"], "mean": row["mean"],
             "std": row["std"], "steps": row["steps"], "published_env_id": row["env_id"], "source": zoo["source"],
             "licence": zoo["licence"], "x_axis": zoo["x_axis"]} for row in rows]


def short(value: float, scale: float) -> str:
    """value with as many decimals as a score of this scale needs: 247, 20.6, 0.61."""
    size = abs(scale)
    return f"{value:.0f}" if size >= 100 else f"{value:.1f}" if size >= 10 else f"{value:.2f}"


def standing(env_id: str, algorithm: str, final: float | None) -> dict | None:
    """Where a run's final score stands against the published one: "final 247; RL Zoo PPO: 242 ± 32"."""
    rows = final_scores(env_id, algorithm)
    if not rows:
        return None
    row = rows[0]
    published = f"{row['label']}: {short(row['mean'], row['mean'])} ± {short(row['std'], row['mean'])}"
    text = published if final is None else f"final {short(final, final)}; {published}"
    return {**row, "final": final, "text": text}


@functools.cache
def _curve_files() -> list[dict]:
    folder = DATA / "curves"
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def cut(curve: dict, up_to: float) -> dict:
    """A curve up to `up_to` agent steps, its last point interpolated there (a chart of a run spans no further)."""
    steps = curve["steps"]
    if up_to >= steps[-1]:
        return curve
    kept = [step for step in steps if step < up_to] + [up_to]
    return {**curve, "steps": kept, **{key: np.interp(kept, steps, curve[key]).tolist() for key in ("mean", "low", "high")}}


def curves(env_id: str, algorithm: str | None = None, up_to: float | None = None) -> list[dict]:
    """Published learning curves for this task, x in agent steps: {"label", "steps", "mean", "low", "high", ...}.

    A file's "frames_per_x" or "agent_steps_per_x" says what one unit of its x axis is; frames are divided by
    the 4 frames of an Atari agent step, so the curve lines up with a run's steps. `up_to`: cut there (cut()).
    """
    found = []
    for source in _curve_files():
        for published_env_id, by_algorithm in source["curves"].items():
            if not same_task(env_id, published_env_id):
                continue
            for name, curve in by_algorithm.items():
                if algorithm is not None and name.lower() != algorithm.lower():
                    continue
                if "agent_steps_per_x" in source:
                    per_x = source["agent_steps_per_x"]
                else:
                    per_x = source["frames_per_x"] / FRAMES_PER_ATARI_STEP
                found.append({
                    "label": f"{source['name']} {name}", "algorithm": name, "published_env_id": published_env_id,
                    "steps": [x * per_x for x in curve["x"]], "mean": curve["mean"], "low": curve["low"],
                    "high": curve["high"], "band": curve.get("band", source.get("band", "")),
                    "x_note": source["x_note"], "source": source["source"], "licence": source["licence"],
                })
    return found if up_to is None else [cut(curve, up_to) for curve in found]
