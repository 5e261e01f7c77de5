"""Reduce Dopamine's published Atari baselines to the curve files under data/curves/ (dopamine_<game>.json).

Dopamine (https://github.com/google/dopamine, Apache-2.0) publishes, per game, baselines/atari/data/<game>.json:
a list of {"Iteration", "Value", "Agent"} records, each run's iterations 0..198 one after the other, agent by
agent. This keeps each run's value at every 10th iteration and its last, for the agents rlweb has (DQN, C51,
Rainbow: rlweb's algorithm names are the lower-cased agent names), with their mean and the lowest and highest run.

    python -m rlweb.scores.dopamine_curves breakout.json ALE/Breakout-v5 [--agents DQN,Rainbow] [--check]

writes rlweb/scores/data/curves/dopamine_breakout.json from a downloaded file (at the commit named in COMMIT);
--check compares instead of writing. Records of only the kept iterations (a partial copy) reduce the same.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from rlweb.scores.normalise import DATA

COMMIT = "8842298e89cfe42c80ea71f63913017696785f0f"
EVERY = 10
AGENTS = ("DQN", "C51", "Rainbow")


def runs(records: list[dict], agent: str) -> list[list[tuple[int, float]]]:
    """One agent's runs in file order; a run ends where the iteration stops increasing."""
    found: list[list[tuple[int, float]]] = []
    for record in records:
        if record["Agent"] != agent:
            continue
        if not found or record["Iteration"] <= found[-1][-1][0]:
            found.append([])
        found[-1].append((int(record["Iteration"]), float(record["Value"])))
    return found


def reduce(records: list[dict], agent: str, every: int = EVERY) -> dict | None:
    """{"x", "mean", "low", "high", "seeds"} for one agent: every `every`th iteration and the last, per run."""
    agent_runs = runs(records, agent)
    if not agent_runs:
        return None
    kept = [[(it, value) for index, (it, value) in enumerate(run) if it % every == 0 or index == len(run) - 1]
            for run in agent_runs]
    x = [it for it, _ in kept[0]]
    if any([it for it, _ in run] != x for run in kept):
        raise ValueError(f"{agent}: the runs do not share their iterations")
    seeds = [[value for _, value in run] for run in kept]
    by_x = list(zip(*seeds))
    return {"x": x, "mean": [statistics.fmean(values) for values in by_x], "low": [min(values) for values in by_x],
            "high": [max(values) for values in by_x], "seeds": seeds}


def source_file(game: str, env_id: str, records: list[dict], agents=AGENTS) -> dict:
    curves = {agent.lower(): curve for agent in agents if (curve := reduce(records, agent)) is not None}
    counts = ", ".join(f"{agent} {len(curve['seeds'])} runs" for agent, curve in curves.items())
    url = f"https://github.com/google/dopamine/blob/{COMMIT}/baselines/atari/data/{game}.json"
    return {
        "name": "Dopamine",
        "source": f"Dopamine's Atari baselines, baselines/atari/data/{game}.json ({counts}), {url}",
        "licence": "Apache-2.0 (Copyright Google LLC), https://github.com/google/dopamine/blob/master/LICENSE",
        "notes": [
            "Each value is a run's average return in one training iteration as Dopamine publishes it (its plots: "
            "'Return'); every 10th iteration and the last are kept, as published, per run (seeds), with their mean "
            "and the lowest and highest run (band: min to max).",
            "Dopamine's default Atari setup: an iteration is 250,000 agent steps, 1,000,000 frames (4 frames an "
            "agent step), sticky actions (repeat_action_probability 0.25), as Gymnasium's ALE v5 ids have.",
            "Reduced by python -m rlweb.scores.dopamine_curves from the file at the commit named in source.",
        ],
        "x_unit": "iteration",
        "frames_per_x": 1000000,
        "x_note": "Dopamine iterations of 1,000,000 frames = 250,000 agent steps",
        "band": "min to max over the runs",
        "curves": {env_id: curves},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="Dopamine's baselines/atari/data/<game>.json")
    parser.add_argument("env_id", help="the Gymnasium id it is filed under, e.g. ALE/Breakout-v5")
    parser.add_argument("--agents", default=",".join(AGENTS))
    parser.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing")
    args = parser.parse_args(argv)
    game = args.path.name.removesuffix(".json")
    built = source_file(game, args.env_id, json.loads(args.path.read_text()), args.agents.split(","))
    out = DATA / "curves" / f"dopamine_{game}.json"
    if args.check:
        shipped = json.loads(out.read_text())["curves"][args.env_id]
        same = all(shipped.get(name) == curve for name, curve in built["curves"][args.env_id].items())
        print(f"{out.name}: {'same' if same else 'DIFFERENT'}")
        return 0 if same else 1
    out.write_text(json.dumps(built, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
