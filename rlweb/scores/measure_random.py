"""Measure the score of a uniformly random policy on the non-Atari tasks: the low end of min-max normalisation.

    python -m rlweb.scores.measure_random        # rewrites rlweb/scores/data/random_scores.json

Each task plays EPISODES episodes (fewer for the slow MuJoCo ones), actions drawn uniformly from the
action space, environment and action space seeded from 0, episodes ended by the task's own time limit.
"""

import json
import platform
from pathlib import Path

import gymnasium as gym
import numpy as np

TASKS = {  # env id -> episodes
    "CartPole-v1": 100, "Acrobot-v1": 100, "MountainCar-v0": 100, "MountainCarContinuous-v0": 100,
    "Pendulum-v1": 100, "LunarLander-v3": 100, "LunarLanderContinuous-v3": 100, "BipedalWalker-v3": 30,
    "BipedalWalkerHardcore-v3": 30, "Ant-v5": 20, "HalfCheetah-v5": 20, "Hopper-v5": 20, "Humanoid-v5": 20,
    "InvertedDoublePendulum-v5": 20, "InvertedPendulum-v5": 20, "Pusher-v5": 20, "Reacher-v5": 20,
    "Swimmer-v5": 20, "Walker2d-v5": 20,
}
OUTPUT = Path(__file__).parent / "data" / "random_scores.json"


def random_returns(env_id: str, episodes: int) -> list[float]:
    env = gym.make(env_id)
    env.action_space.seed(0)
    returns = []
    for episode in range(episodes):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def main() -> None:
    scores = {}
    for env_id, episodes in TASKS.items():
        returns = random_returns(env_id, episodes)
        scores[env_id] = {"mean": round(float(np.mean(returns)), 3), "std": round(float(np.std(returns)), 3),
                          "episodes": episodes}
        print(env_id, scores[env_id], flush=True)
    OUTPUT.write_text(json.dumps({
        "source": "measured by rlweb (python -m rlweb.scores.measure_random): a uniformly random policy, "
                  f"seeds 0.., Gymnasium {gym.__version__}, Python {platform.python_version()}",
        "licence": "rlweb's own measurement, under rlweb's licence",
        "scores": scores,
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
