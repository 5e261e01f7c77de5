"""Issue 5 benchmarks: sample efficiency of SAC, TD3, DDPG, Q-learning and ES, and SAC/TD3 speed
against stable-baselines3 on the same machine.

    python -m benchmarks continuous --pendulum    # sac, td3, ddpg to -200 on Pendulum-v1 within 20k steps
    python -m benchmarks continuous --mcc         # sac, td3 to 90 on MountainCarContinuous-v0
    python -m benchmarks continuous --qlearning   # FrozenLake (slippery and not), MountainCar-v0
    python -m benchmarks continuous --es          # CartPole-v1
    python -m benchmarks continuous --speed       # env steps per second vs stable-baselines3, interleaved
    python -m benchmarks continuous               # all of them
    options: --seeds=3 --precision=float32 --repeats=2 --speed-steps=3000 --sb3-threads=1
             --sb3-flush-denormals (SB3 with denormals flushed too, as our training does)

Runs one thing at a time with one torch thread (the machines have 2 shared cores); timings vary by up
to 15% between identical runs, so speeds are compared as ratios of interleaved runs.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time

import gymnasium as gym
import numpy as np
import torch

import trainer
from trainer.agent import denormals_flushed
from trainer.events import Sink


class StopAtThreshold(Sink):
    """Records evaluations and stops the run at the first one reaching `threshold`."""

    def __init__(self, threshold: float):
        self.threshold = threshold
        self.evals: list[tuple[int, float]] = []

    def emit(self, event: dict) -> None:
        if event["kind"] == "eval":
            self.evals.append((event["step"], event["values"]["eval/return_mean"]))

    def should_stop(self) -> bool:
        return bool(self.evals) and self.evals[-1][1] >= self.threshold

    def steps_needed(self) -> int | None:
        return next((step for step, score in self.evals if score >= self.threshold), None)


def steps_to_threshold(algorithm: str, env_id: str, threshold: float, budget: int, seed: int,
                       eval_interval: int, eval_episodes: int = 10, final_episodes: int = 0,
                       **hyperparameters) -> dict:
    """Train until an evaluation reaches `threshold` or the budget ends; with `final_episodes`, the policy
    it stopped with is evaluated again on that many fresh episodes (`final_eval`)."""
    sink = StopAtThreshold(threshold)
    started = time.perf_counter()
    agent = trainer.make(algorithm, env_id, seed=seed, device="cpu", **hyperparameters)
    agent.learn(budget, sink=sink, eval_interval=eval_interval, eval_episodes=eval_episodes)
    seconds = time.perf_counter() - started
    best = max((score for _, score in sink.evals), default=float("nan"))
    result = {"algorithm": algorithm, "env_id": env_id, "seed": seed, "steps_needed": sink.steps_needed(),
              "best_eval": round(best, 1), "seconds": round(seconds, 1)}
    if final_episodes:
        result["final_eval"] = round(agent.evaluate(final_episodes, seed=seed + 2_000_003)["mean"], 1)
    print(result, flush=True)
    return result


def summarise(name: str, results: list[dict], budget: int) -> None:
    needed = [r["steps_needed"] for r in results]
    solved = [n for n in needed if n is not None]
    finals = [r["final_eval"] for r in results if "final_eval" in r]
    print(f"== {name}: solved {len(solved)}/{len(results)} within {budget} steps; steps needed {needed}; "
          f"median {int(np.median(solved)) if solved else None}; seconds {[r['seconds'] for r in results]}"
          + (f"; fresh evaluation at the end {finals}" if finals else ""), flush=True)


def pendulum(seeds: int, precision: str = "float32") -> None:
    for algorithm in ("sac", "td3", "ddpg"):
        results = [steps_to_threshold(algorithm, "Pendulum-v1", -200, 20_000, seed, eval_interval=1_000,
                                      precision=precision)
                   for seed in range(seeds)]
        summarise(f"{algorithm} ({precision}) Pendulum-v1 >= -200", results, 20_000)


def mountain_car_continuous(seeds: int) -> None:
    # SAC: our defaults with pink exploration noise (Eberhard et al. 2023; white-noise SAC, even with the
    # zoo's settings short of gSDE, never found the flag) and small networks. TD3: the zoo's OU noise 0.5.
    settings = {
        "sac": dict(noise_exponent=1.0, hidden_layers="64,64", buffer_size=50_000),
        "td3": dict(noise_type="ornstein-uhlenbeck", action_noise=0.5, learning_starts=1_000, gamma=0.99,
                    hidden_layers="64,64", buffer_size=50_000),
    }
    for algorithm, hyperparameters in settings.items():
        results = [steps_to_threshold(algorithm, "MountainCarContinuous-v0", 90, 50_000, seed,
                                      eval_interval=2_500, eval_episodes=5, **hyperparameters)
                   for seed in range(seeds)]
        summarise(f"{algorithm} MountainCarContinuous-v0 >= 90", results, 50_000)


def decay_factor(start: float, end: float, steps: int) -> float:
    """The per-step factor that takes a value from `start` to `end` in `steps` multiplications."""
    return math.exp(math.log(end / start) / steps)


def qlearning(seeds: int) -> None:
    env_id = "rlweb-bench/FrozenLake-deterministic-v1"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point="gymnasium.envs.toy_text:FrozenLakeEnv", kwargs={"is_slippery": False},
                     max_episode_steps=100)
    runs = [
        ("FrozenLake-v1 non-slippery = 1.0", env_id, 1.0, 20_000, 1_000, 100, dict(exploration_decay=0.999)),
        # the optimal slippery policy reaches the goal about 74-82% of the time
        ("FrozenLake-v1 slippery >= 0.7", "FrozenLake-v1", 0.7, 200_000, 10_000, 200,
         dict(exploration_decay=0.99995, learning_rate=0.05)),
        # gymnasium's reward_threshold, judged on 100 greedy episodes (the velocity-sign rule scores about
        # -120). Undiscounted on a 40x40 grid: epsilon decays to 0.01 over 12M steps and the learning rate
        # from 0.1 to 0.005 over 20M, so the greedy policy settles; 16 sub-envs for speed. A 20x20 grid with
        # the same schedule over 5M steps reaches -110 on 2 seeds of 3: its cells are too coarse to tell
        # apart starts near the bottom of the valley that need different swings.
        ("MountainCar-v0 >= -110 (40x40 grid)", "MountainCar-v0", -110, 20_000_000, 500_000, 100,
         dict(gamma=1.0, exploration_decay=decay_factor(1.0, 0.01, 12_000_000), learning_rate=0.1,
              learning_rate_decay=decay_factor(0.1, 0.005, 20_000_000), grid_size="40", num_envs=16)),
    ]
    for name, env, threshold, budget, interval, episodes, hyperparameters in runs:
        results = [steps_to_threshold("qlearning", env, threshold, budget, seed, eval_interval=interval,
                                      eval_episodes=episodes, final_episodes=episodes, **hyperparameters)
                   for seed in range(seeds)]
        summarise(f"qlearning {name}", results, budget)


def evolution_strategies(seeds: int) -> None:
    results = [steps_to_threshold("es", "CartPole-v1", 475, 500_000, seed, eval_interval=10_000, eval_episodes=10,
                                  num_workers=2) for seed in range(seeds)]
    summarise("es CartPole-v1 >= 475", results, 500_000)


# --- speed against stable-baselines3 -----------------------------------------------------------------

DEFAULT_THREADS = torch.get_num_threads()  # what a library gets when it does not choose


def _ours(algorithm: str, steps: int, seed: int, settings: dict) -> tuple[float, float]:
    torch.set_num_threads(1)  # as the CLI and the worker run training
    agent = trainer.make(algorithm, "Pendulum-v1", seed=seed, device="cpu", **settings)
    started = time.perf_counter()
    agent.learn(steps, eval_episodes=0)
    rate = steps / (time.perf_counter() - started)
    return rate, agent.evaluate(10, seed=10_000 + seed)["mean"]


def _theirs(algorithm: str, steps: int, seed: int, settings: dict, threads: int,
            flush_denormals: bool) -> tuple[float, float]:
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    hidden = [int(n) for n in settings["hidden_layers"].split(",")]
    common = dict(learning_rate=settings["critic_learning_rate"], buffer_size=settings["buffer_size"],
                  learning_starts=settings["learning_starts"], batch_size=settings["batch_size"],
                  tau=settings["tau"], gamma=settings["gamma"], train_freq=1, gradient_steps=1,
                  policy_kwargs=dict(net_arch=hidden), seed=seed, device="cpu", verbose=0)
    if algorithm == "sac":
        model = SAC("MlpPolicy", "Pendulum-v1", **common)
    else:
        model = TD3("MlpPolicy", "Pendulum-v1", action_noise=NormalActionNoise(np.zeros(1), 0.1 * 2 * np.ones(1)),
                    **common)
    torch.set_num_threads(threads or DEFAULT_THREADS)
    started = time.perf_counter()
    with denormals_flushed() if flush_denormals else contextlib.nullcontext():  # ours always flushes them
        model.learn(steps)
    rate = steps / (time.perf_counter() - started)
    env = gym.make("Pendulum-v1")
    env.reset(seed=10_000 + seed)
    mean, _ = evaluate_policy(model, env, n_eval_episodes=10, deterministic=True)
    return rate, float(mean)


# hidden-layer matrix products per gradient update that the same update needs in any implementation:
# forward passes, weight gradients and input gradients of the [batch, h1] x [h1, h2] layer. SAC: target
# actor, twin target critics, twin critics, actor and the twin critics at the actor's actions forward;
# weight gradients of the critics and the actor; input gradients of the critics, the actor, and of the
# critic that the min picks for each sample (one product's worth). TD3, per update with the actor every
# second one: target actor, twin target critics and twin critics forward, critic weight and input
# gradients, and half of (actor and first critic forward, actor weight gradient, critic and actor input
# gradients). Layers into and out of the hidden pair are small and left out, so this is a lower bound.
HIDDEN_PRODUCTS = {"sac": {"forward": 8, "weight": 3, "input": 4}, "td3": {"forward": 6, "weight": 2.5, "input": 3}}


def _hidden_products_ms(hidden: str, batch_size: int, counts: dict[str, float]) -> float:
    """Milliseconds that `counts` products of one hidden layer take (one thread, float32)."""
    first, second = (int(n) for n in hidden.split(","))
    x, w, g = torch.randn(batch_size, first), torch.randn(first, second), torch.randn(batch_size, second)
    products = {"forward": lambda: torch.mm(x, w), "weight": lambda: torch.mm(x.t(), g),
                "input": lambda: torch.mm(g, w.t())}
    total = 0.0
    for kind, count in counts.items():
        times = []
        for _ in range(30):
            started = time.perf_counter()
            products[kind]()
            times.append(time.perf_counter() - started)
        total += count * float(np.median(times)) * 1e3
    return total


def product_floor(algorithm: str, setting: dict, rounds: int = 5) -> None:
    """How fast any float32 implementation of the same update could be against SB3's: SB3's time per
    gradient update over the time of the matrix products that update cannot skip, interleaved."""
    from stable_baselines3 import SAC, TD3

    torch.set_num_threads(1)
    hidden = [int(n) for n in setting["hidden_layers"].split(",")]
    model = (SAC if algorithm == "sac" else TD3)("MlpPolicy", "Pendulum-v1", batch_size=setting["batch_size"],
                                                 learning_starts=0, policy_kwargs=dict(net_arch=hidden), device="cpu")
    model.learn(300)
    theirs, floor = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        model.train(gradient_steps=20, batch_size=setting["batch_size"])
        theirs.append((time.perf_counter() - started) / 20 * 1e3)
        floor.append(_hidden_products_ms(setting["hidden_layers"], setting["batch_size"], HIDDEN_PRODUCTS[algorithm]))
    print(f"== {algorithm} float32 bound: stable-baselines3 {np.median(theirs):.2f} ms per gradient update; the "
          f"{sum(HIDDEN_PRODUCTS[algorithm].values()):g} hidden-layer matrix products the update needs take "
          f"{np.median(floor):.2f} ms, so no float32 update on this CPU runs more than "
          f"{np.median(theirs) / np.median(floor):.2f}x faster than theirs", flush=True)


def speed(repeats: int, steps: int, sb3_threads: int, precisions: tuple[str, ...], sb3_flush: bool) -> None:
    # the same settings on both sides: our defaults (the zoo's Pendulum settings), a shorter warm start
    # so most steps include an update; SB3's TD3 noise std is in env units (0.1 of the half-range = 0.2)
    settings = {
        "sac": dict(critic_learning_rate=1e-3, policy_learning_rate=1e-3, alpha_learning_rate=1e-3, buffer_size=100_000,
                    learning_starts=100, batch_size=256, tau=0.005, gamma=0.99, hidden_layers="256,256"),
        "td3": dict(critic_learning_rate=1e-3, policy_learning_rate=1e-3, buffer_size=100_000, learning_starts=1_000,
                    batch_size=256, tau=0.005, gamma=0.98, hidden_layers="400,300", action_noise=0.1),
    }
    for algorithm, setting in settings.items():
        ratios: dict[str, list[float]] = {precision: [] for precision in precisions}
        for repeat in range(repeats):  # interleaved: ours (each precision), theirs, ours, theirs
            ours = {precision: _ours(algorithm, steps, repeat, {**setting, "precision": precision})
                    for precision in ratios}
            theirs, their_return = _theirs(algorithm, steps, repeat, setting, sb3_threads, sb3_flush)
            for precision, (rate, _) in ours.items():
                ratios[precision].append(rate / theirs)
            print(f"{algorithm} run {repeat}: stable-baselines3 {theirs:.1f} steps/s (eval {their_return:.1f}); ours "
                  + "; ".join(f"{precision} {rate:.1f} steps/s (eval {score:.1f}, ratio {rate / theirs:.2f})"
                              for precision, (rate, score) in ours.items()), flush=True)
        for precision, values in ratios.items():
            print(f"== {algorithm} speed ratio, ours in {precision} at 1 thread / stable-baselines3 (float32) at "
                  f"{sb3_threads or DEFAULT_THREADS} threads{' with denormals flushed' if sb3_flush else ''}, "
                  f"{repeats} interleaved runs of {steps} steps: "
                  f"{', '.join(f'{r:.2f}' for r in values)}; median {np.median(values):.2f}", flush=True)
        product_floor(algorithm, setting)


def main(options: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks continuous", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for part in ("pendulum", "mcc", "qlearning", "es", "speed"):
        parser.add_argument(f"--{part}", action="store_true")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                        help="precision of sac, td3 and ddpg in --pendulum; bfloat16 also adds a bfloat16 run of "
                             "ours to --speed (faster only on CPUs with AVX512-BF16 or AMX)")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved speed runs per algorithm")
    parser.add_argument("--speed-steps", type=int, default=3_000)
    parser.add_argument("--sb3-threads", type=int, default=1,
                        help="torch threads for stable-baselines3 (0: torch's default, one per core)")
    parser.add_argument("--sb3-flush-denormals", action="store_true",
                        help="run stable-baselines3 with denormal floats flushed to zero too, as our training does")
    args = parser.parse_args(options)
    torch.set_num_threads(1)
    jobs = {"pendulum": lambda: pendulum(args.seeds, args.precision), "mcc": lambda: mountain_car_continuous(args.seeds),
            "qlearning": lambda: qlearning(args.seeds), "es": lambda: evolution_strategies(args.seeds),
            "speed": lambda: speed(args.repeats, args.speed_steps, args.sb3_threads,
                                   ("float32",) if args.precision == "float32" else ("float32", "bfloat16"),
                                   args.sb3_flush_denormals)}
    chosen = [name for name in jobs if getattr(args, name)] or list(jobs)
    for name in chosen:
        jobs[name]()


if __name__ == "__main__":
    main()
