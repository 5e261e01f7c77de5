"""DQN family: replay memory, speed against stable-baselines3, env steps each preset needs on CartPole.

    python -m benchmarks dqn                 # everything (about an hour on 2 cores)
    python -m benchmarks dqn --speed         # ours vs SB3, tuned CartPole settings, interleaved
    python -m benchmarks dqn --presets       # env steps to a 475 eval return, each preset, 3 seeds
    python -m benchmarks dqn --presets=c51,rainbow   # only these presets
    python -m benchmarks dqn --memory        # replay bytes per Atari transition
    python -m benchmarks dqn --recurrent     # r2d1 vs feed-forward DQN on CartPole without velocities
    python -m benchmarks dqn --atari         # ours vs SB3 on ALE/Pong-v5, Nature-DQN settings, and the CNN
                                             # bound (about 20 minutes; not part of "everything")
    python -m benchmarks dqn --atari-phases  # where our dqn and rainbow presets' updates and act steps spend
                                             # their CPU time on ALE/Pong-v5 (a few minutes)
    options for --atari: --pairs=2 --atari-steps=20000 --learning-starts=1000 --device=cpu|cuda
                                             (cuda: both sides on the GPU, and each side's update and act
                                             step timed there instead of the CPU bound)
"""

from __future__ import annotations

import multiprocessing
import statistics
import time

import numpy as np
import torch

import trainer
from trainer import cpu_speed
from trainer.events import Sink

# rl-baselines3-zoo's tuned CartPole-v1 settings (hyperparams/dqn.yml), our DQN defaults
ZOO_CARTPOLE = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                    target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                    exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))
# per-preset settings for CartPole: returns reach 100 (discounted), so C51's support must cover them
PRESET_OVERRIDES = {"c51": dict(v_min=0.0, v_max=100.0), "rainbow": dict(v_min=0.0, v_max=100.0)}
SOLVED = 475.0


class StopWhenSolved(Sink):
    """Stops a run at the first evaluation whose mean return reaches the threshold."""

    def __init__(self, threshold: float):
        self.threshold = threshold
        self.solved_at: int | None = None
        self.best = float("-inf")

    def emit(self, event: dict) -> None:
        if event["kind"] != "eval":
            return
        self.best = max(self.best, event["values"]["eval/return_mean"])
        if self.best >= self.threshold and self.solved_at is None:
            self.solved_at = event["step"]

    def should_stop(self) -> bool:
        return self.solved_at is not None


def ours(seed: int, total_steps: int) -> tuple[float, float]:
    agent = trainer.make("dqn", "CartPole-v1", seed=seed)
    started = time.perf_counter()
    agent.learn(total_steps, eval_episodes=0)
    seconds = time.perf_counter() - started
    return total_steps / seconds, agent.evaluate(10, seed=10_000 + seed)["mean"]


def theirs(seed: int, total_steps: int) -> tuple[float, float]:
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.evaluation import evaluate_policy

    model = DQN("MlpPolicy", gym.make("CartPole-v1"), seed=seed, device="cpu", **ZOO_CARTPOLE)
    started = time.perf_counter()
    model.learn(total_steps)
    seconds = time.perf_counter() - started
    env = gym.make("CartPole-v1")
    env.reset(seed=10_000 + seed)
    mean, _ = evaluate_policy(model, env, n_eval_episodes=10, deterministic=True)
    return total_steps / seconds, float(mean)


def speed(seeds=(0, 1, 2), total_steps: int = 50_000) -> None:
    print(f"DQN on CartPole-v1, zoo-tuned settings, {total_steps} env steps, torch threads "
          f"{torch.get_num_threads()}, interleaved runs")
    rates = {"rlweb": [], "sb3": []}
    returns = {"rlweb": [], "sb3": []}
    for seed in seeds:
        for name, run in (("rlweb", ours), ("sb3", theirs)):
            rate, score = run(seed, total_steps)
            rates[name].append(rate)
            returns[name].append(score)
            print(f"  seed {seed} {name:>5}: {rate:8.1f} env steps/s, eval return {score:6.1f}", flush=True)
    ratio = statistics.median(rates["rlweb"]) / statistics.median(rates["sb3"])
    print(f"  median steps/s: rlweb {statistics.median(rates['rlweb']):.1f}, sb3 {statistics.median(rates['sb3']):.1f}"
          f" -> ratio {ratio:.2f}x (target >= 2x)")
    print(f"  mean eval return: rlweb {np.mean(returns['rlweb']):.1f}, sb3 {np.mean(returns['sb3']):.1f}")


def steps_to_solve(algorithms, env_id: str, seeds, budget: int, eval_interval: int) -> None:
    """For each algorithm and seed: the env steps at the first eval with mean return >= SOLVED, or the best."""
    print(f"Env steps to a mean eval return >= {SOLVED} on {env_id} (10 episodes every {eval_interval} steps, "
          f"budget {budget})")
    for algorithm in algorithms:
        needed, best = [], []
        for seed in seeds:
            sink = StopWhenSolved(SOLVED)
            started = time.perf_counter()
            trainer.make(algorithm, env_id, seed=seed, **PRESET_OVERRIDES.get(algorithm, {})).learn(
                budget, sink=sink, eval_interval=eval_interval, eval_episodes=10)
            needed.append(sink.solved_at)
            best.append(sink.best)
            print(f"    {algorithm} seed {seed}: {sink.solved_at or f'>{budget}'} steps, best eval {sink.best:.1f}, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
        shown = ", ".join(str(n) if n is not None else f">{budget}" for n in needed)
        solved = [n for n in needed if n is not None]
        median = statistics.median(solved) if len(solved) == len(needed) else None
        print(f"  {algorithm:>12}: {shown}  (median {median if median is not None else 'n/a'}; best evals "
              f"{', '.join(f'{b:.0f}' for b in best)})", flush=True)


PRESETS = ("dqn", "double-dqn", "dueling-dqn", "noisy-dqn", "nstep-dqn", "per-dqn", "c51", "rainbow")


def presets(names=PRESETS, seeds=(0, 1, 2), budget: int = 100_000, eval_interval: int = 2_500) -> None:
    steps_to_solve(names, "CartPole-v1", seeds, budget, eval_interval)


def recurrent(seeds=(0, 1, 2), budget: int = 60_000, eval_interval: int = 2_500) -> None:
    """A partially observed task: positions only. A feed-forward DQN cannot infer the velocities."""
    steps_to_solve(("r2d1", "dqn"), "rlweb/CartPoleNoVelocity-v1", seeds, budget, eval_interval)


def memory() -> None:
    from trainer.buffers import FrameStackReplayBuffer, ReplayBuffer

    deduplicated = FrameStackReplayBuffer(1000, (4, 84, 84), np.uint8).bytes_per_transition()
    plain = ReplayBuffer(1000, (4, 84, 84), np.uint8)
    stacked = sum(a.nbytes for a in (plain.obs, plain.next_obs, plain.actions, plain.rewards, plain.terminated,
                                     plain.ended)) / plain.capacity
    print(f"Atari replay, bytes per transition: frame-deduplicated {deduplicated:.0f} "
          f"({deduplicated * 1e6 / 1e9:.2f} GB per million), stacked obs + next_obs {stacked:.0f} "
          f"({stacked * 1e6 / 1e9:.1f} GB per million)")


# --- the Atari path: ours vs stable-baselines3 with the same Nature-DQN settings -----------------------------

ATARI_ID = "ALE/Pong-v5"


def atari_config():
    """Our dqn preset for Pong (RL Zoo's Atari settings): the settings both sides train with."""
    return trainer.make("dqn", ATARI_ID, device="cpu", preset="auto").config


def sb3_atari_model(seed: int, learning_starts: int, device: str = "cpu"):
    """SB3's DQN with our preset's settings, on its AtariWrapper (the same preprocessing as ours: no-op reset,
    4-frame skip with max-pooling, 84x84 grey, episodic life, fire reset, clipped rewards) and a 4-frame
    stack; frameskip=1 so that the wrapper does the skipping, as ours does."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    c = atari_config()
    env = VecFrameStack(make_atari_env(ATARI_ID, n_envs=1, seed=seed, env_kwargs=dict(frameskip=1)), n_stack=4)
    return DQN("CnnPolicy", env, learning_rate=c.learning_rate, buffer_size=c.buffer_size,
               learning_starts=learning_starts, batch_size=c.batch_size, gamma=c.gamma, tau=c.tau,
               train_freq=c.train_frequency, gradient_steps=c.gradient_steps,
               target_update_interval=c.target_update_interval, exploration_fraction=c.exploration_fraction,
               exploration_initial_eps=c.exploration_initial_eps, exploration_final_eps=c.exploration_final_eps,
               max_grad_norm=c.max_grad_norm, policy_kwargs=dict(optimizer_kwargs=dict(eps=c.optimizer_epsilon)),
               seed=seed, device=device, verbose=0)


def atari_run(side: str, seed: int, steps: int, learning_starts: int, device: str = "cpu") -> tuple[float, float]:
    """Env steps per second of wall time and of this process's CPU time, learning included."""
    torch.set_num_threads(1)
    if side == "rlweb":
        agent = trainer.make("dqn", ATARI_ID, seed=seed, device=device, preset="auto", learning_starts=learning_starts)
        learn = lambda: agent.learn(steps, eval_episodes=0)  # noqa: E731
    else:
        model = sb3_atari_model(seed, learning_starts, device)
        learn = lambda: model.learn(steps)  # noqa: E731
    wall, cpu = time.perf_counter(), time.process_time()
    learn()
    return steps / (time.perf_counter() - wall), steps / (time.process_time() - cpu)


def nature_cnn_passes_ms(batch: torch.Tensor, num_actions: int, rounds: int) -> dict[str, float]:
    """CPU milliseconds of the CNN passes that any DQN update needs, in plain torch: the target network
    forward on the next observations, the online forward and backward on the observations (no optimizer,
    no replay), in torch's default layout (NCHW) and channels-last; median over `rounds`."""
    from torch import nn
    from trainer.networks import NatureCNN

    times: dict[str, list[float]] = {"nchw": [], "channels_last": []}
    networks = [nn.Sequential(NatureCNN(tuple(batch.shape[1:])), nn.Linear(512, num_actions)) for _ in range(2)]
    convolutions = [network[0].convolutions for network in networks]
    for _ in range(rounds):
        for layout in times:
            images = batch.contiguous(memory_format=torch.channels_last if layout == "channels_last"
                                      else torch.contiguous_format) / 255.0

            def q(k, x):
                return networks[k][1](networks[k][0].linear(convolutions[k](x)))

            started = time.process_time()
            with torch.no_grad():
                q(1, images)
            q(0, images).sum().backward()
            times[layout].append((time.process_time() - started) * 1e3)
    return {layout: statistics.median(values) for layout, values in times.items()}


def filled_agent(algorithm: str, device: str):
    """Our `algorithm` preset for Pong on `device`, after 1,100 env steps of filling replay (learning from 1,000)."""
    agent = trainer.make(algorithm, ATARI_ID, seed=0, device=device, preset="auto", learning_starts=1_000)
    agent.learn(1_100, eval_episodes=0)
    return agent


def atari_update_ms(side: str, keep_memory: bool, rounds: int = 30) -> tuple[float, dict[str, float]]:
    """CPU milliseconds per gradient update of one side (median over `rounds`, interleaved with the bare CNN
    passes on the same batch size in the same process), after 1,100 env steps of filling replay."""
    from trainer.agent import denormals_flushed, keep_freed_memory

    torch.set_num_threads(1)
    c = atari_config()
    if keep_memory:
        keep_freed_memory()  # ours sets it in learn(); for SB3 only when asked
    if side == "rlweb":
        agent = filled_agent("dqn", "cpu")

        def update():
            with denormals_flushed():  # as in learn()
                list(agent.strategy.updates(agent.buffer, 1))
    else:
        model = sb3_atari_model(0, 1_000)
        model.learn(1_100)

        def update():
            model.train(gradient_steps=1, batch_size=c.batch_size)
    batch = torch.randint(0, 256, (c.batch_size, 4, 84, 84), dtype=torch.uint8)
    updates, passes = [], {"nchw": [], "channels_last": []}
    for _ in range(rounds):
        started = time.process_time()
        update()
        updates.append((time.process_time() - started) * 1e3)
        for layout, ms in nature_cnn_passes_ms(batch, 6, 1).items():
            passes[layout].append(ms)
    return statistics.median(updates), {layout: statistics.median(values) for layout, values in passes.items()}


def atari_gpu_ms(side: str, rounds: int = 300) -> dict[str, float]:
    """Wall milliseconds on the GPU, after 1,100 env steps of filling replay: one gradient update (sampling
    the batch from replay included, through a CUDA graph unless RLWEB_CUDA_GRAPHS=0), ours also with the
    batch already on the GPU as plain PyTorch calls (the network's part, never a graph), and one act step
    (observation in, action out); each the mean over `rounds`, the GPU synchronised before the clock stops."""
    torch.set_num_threads(1)
    c = atari_config()
    if side == "rlweb":
        agent = filled_agent("dqn", "cuda")
        batch = agent.buffer.sample(c.batch_size, agent.rng, c.n_step_return, c.gamma)
        observation = agent.buffer.observations_at(np.array([5]))

        def update():
            list(agent.strategy.updates(agent.buffer, 1))

        def update_on_device():
            agent.learn_from(batch, agent.targets(batch))

        def act():
            agent.strategy.greedy(observation)
    else:
        model = sb3_atari_model(0, 1_000, "cuda")
        model.learn(1_100)
        observation = model.replay_buffer.observations[5]

        def update():
            model.train(gradient_steps=1, batch_size=c.batch_size)
        update_on_device = None

        def act():
            model.predict(observation, deterministic=True)
    timings = {}
    for name, function in (("update", update), ("update, batch on the GPU, plain calls", update_on_device),
                           ("act", act)):
        if function is None:
            continue
        for _ in range(20):  # warm-up: kernels chosen, allocator filled
            function()
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(rounds):
            function()
        torch.cuda.synchronize()
        timings[name] = (time.perf_counter() - started) * 1e3 / rounds
    return timings


def atari_gpu_profile(algorithm: str, rounds: int = 50, rows: int = 12) -> str:
    """torch.profiler's table of `rounds` updates and act steps of our `algorithm` preset on the GPU
    (after 1,100 env steps of filling replay), the operators that took the most CPU time first: on a GPU,
    where the CPU's time goes decides whether the GPU waits."""
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    agent = filled_agent(algorithm, "cuda")
    observation = agent.buffer.observations_at(np.array([5]))
    for _ in range(10):
        list(agent.strategy.updates(agent.buffer, 1))
        agent.strategy.greedy(observation)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        for _ in range(rounds):
            list(agent.strategy.updates(agent.buffer, 1))
            agent.strategy.greedy(observation)
        torch.cuda.synchronize()
    return profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def atari_phases(algorithm: str, rounds: int = 40) -> dict[str, float]:
    """CPU milliseconds (medians over `rounds`, one torch thread) of each phase of one gradient update of our
    `algorithm` preset for Pong, done phase by phase as `DQN.update` does it, then of the whole update as
    training calls it, of one act step (with its fresh noise for noisy nets) and of one env step."""
    from trainer.agent import denormals_flushed
    from trainer.networks import reset_noise

    torch.set_num_threads(1)
    agent = filled_agent(algorithm, "cpu")
    c, buffer = agent.config, agent.buffer
    observation = buffer.observations_at(np.array([5]))
    times: dict[str, list[float]] = {}

    def timed(name: str, function):
        started = time.process_time()
        result = function()
        times.setdefault(name, []).append((time.process_time() - started) * 1e3)
        return result

    def act():
        if c.noisy:
            reset_noise(agent.q_network)
        agent.strategy.greedy(observation)

    sample_options = {"beta": 0.4} if c.prioritized_replay else {}
    with denormals_flushed(), agent.training_envs(1) as (envs, _):
        for _ in range(rounds + 5):
            batch = timed("sample a batch from replay", lambda: buffer.sample(
                c.batch_size, agent.rng, c.n_step_return, c.gamma, **sample_options))
            if c.noisy:
                timed("fresh noise, both networks", lambda: (reset_noise(agent.q_network),
                                                             reset_noise(agent.target_network)))
            with torch.no_grad():
                timed("target network on s'", lambda: agent.target_network(batch.next_obs))
                if c.double_q:
                    timed("online network on s' (double Q)", lambda: agent.q_network(batch.next_obs))
            target = agent.targets(batch)
            outputs = timed("online network on s", lambda: agent.q_network(batch.obs))
            chosen = outputs[torch.arange(c.batch_size), batch.actions.long()]
            loss = (-(target * chosen.log_softmax(dim=1)).sum(dim=1) if c.categorical
                    else torch.nn.functional.huber_loss(chosen, target, reduction="none")).mean()
            agent.q_flat.zero_grad()
            timed("backward", loss.backward)
            timed("gradient clipping and Adam", lambda: (cpu_speed.clip_grad_norm([agent.q_flat], c.max_grad_norm),
                                                         agent.optimizer.step()))
            timed("whole update, as training calls it", lambda: list(agent.strategy.updates(buffer, 1)))
            timed("act step (fresh noise included)", act)
            timed("env step", lambda: envs.step(np.array([envs.single_action_space.sample()])))
    medians = {name: statistics.median(values[5:]) for name, values in times.items()}
    medians["env steps/s this gives (an update every 4 steps)"] = 1e3 * c.train_frequency / (
        medians["whole update, as training calls it"]
        + c.train_frequency * (medians["act step (fresh noise included)"] + medians["env step"]))
    return medians


def atari_phase_table() -> None:
    print(f"Where an update and an act step spend their CPU time: our presets on {ATARI_ID}, batch 32, one torch "
          f"thread, medians of 40 (milliseconds)", flush=True)
    for algorithm in ("dqn", "rainbow"):
        for name, value in in_own_process(atari_phases, algorithm).items():
            print(f"  {algorithm:8s} {name:45s} {value:8.2f}", flush=True)


def in_own_process(function, *args):
    """Each run in a fresh process: nothing (allocator state, threads, caches) carries over from the last."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def atari(pairs: int = 2, steps: int = 20_000, learning_starts: int = 1_000, device: str = "cpu") -> None:
    c = atari_config()
    print(f"DQN on {ATARI_ID}: our dqn preset (RL Zoo's Atari settings: Nature CNN, batch {c.batch_size}, "
          f"an update every {c.train_frequency} steps, lr {c.learning_rate:g}, buffer {c.buffer_size:,}) on both "
          f"sides, learning_starts {learning_starts}, {steps:,} env steps, 1 torch thread, device {device}, each run "
          f"in its own process, interleaved", flush=True)
    rates: dict[str, list[tuple[float, float]]] = {"rlweb": [], "sb3": []}
    for pair in range(pairs):
        for side in ("rlweb", "sb3") if pair % 2 == 0 else ("sb3", "rlweb"):
            rates[side].append(in_own_process(atari_run, side, pair, steps, learning_starts, device))
        (ours, ours_cpu), (theirs, theirs_cpu) = rates["rlweb"][-1], rates["sb3"][-1]
        print(f"  pair {pair}: rlweb {ours:6.1f} env steps/s, sb3 {theirs:6.1f} -> {ours / theirs:.2f}x "
              f"(per CPU second: {ours_cpu:.1f} and {theirs_cpu:.1f} -> {ours_cpu / theirs_cpu:.2f}x)", flush=True)
    ratios = [ours / theirs for (ours, _), (theirs, _) in zip(rates["rlweb"], rates["sb3"])]
    cpu_ratios = [ours / theirs for (_, ours), (_, theirs) in zip(rates["rlweb"], rates["sb3"])]
    print(f"== Atari speed ratio rlweb / sb3: {', '.join(f'{r:.2f}' for r in ratios)}; median "
          f"{statistics.median(ratios):.2f}x (per CPU second: median {statistics.median(cpu_ratios):.2f}x; "
          f"target >= {'2' if device == 'cuda' else '1.3'}x)", flush=True)
    if device == "cuda":
        for algorithm in ("dqn", "rainbow"):
            print(f"== on the GPU, our {algorithm} preset: {ATARI_ID}, 50 updates and act steps, operators by their "
                  f"CPU time\n{in_own_process(atari_gpu_profile, algorithm)}", flush=True)
        for side in ("rlweb", "sb3"):
            timings = in_own_process(atari_gpu_ms, side)
            print(f"== on the GPU, {side}: " + ", ".join(f"{name} {ms:.2f} ms" for name, ms in timings.items()),
                  flush=True)
        return
    bounds = {(side, keep): in_own_process(atari_update_ms, side, keep)
              for side, keep in (("rlweb", True), ("sb3", False), ("sb3", True))}
    for (side, keep), (update, passes) in bounds.items():
        floor = min(passes.values())
        name = {("rlweb", True): "rlweb", ("sb3", False): "stable-baselines3",
                ("sb3", True): "stable-baselines3 with freed memory kept as ours keeps it"}[(side, keep)]
        print(f"== bound: {name}: {update:.1f} ms per gradient update; in the same process the CNN passes "
              f"every update needs (target forward, online forward and backward, batch {c.batch_size}) take "
              f"{passes['nchw']:.1f} ms in torch's default layout and {passes['channels_last']:.1f} ms "
              f"channels-last: the update costs {update / floor:.2f}x the faster of them", flush=True)


def main(options: list[str]) -> None:
    torch.set_num_threads(1)
    chosen = {o.lstrip("-").split("=")[0] for o in options} or {"memory", "speed", "presets", "recurrent"}
    names = next((o.split("=", 1)[1].split(",") for o in options if o.startswith("--presets=")), PRESETS)
    unknown = sorted(set(names) - set(PRESETS))
    if unknown:
        raise SystemExit(f"unknown preset(s) {', '.join(unknown)}; known: {', '.join(PRESETS)}")
    if "memory" in chosen:
        memory()
    if "speed" in chosen:
        speed()
    if "presets" in chosen:
        presets(names)
    if "recurrent" in chosen:
        recurrent()
    if "atari-phases" in chosen:
        atari_phase_table()
    if "atari" in chosen:
        values = {o.lstrip("-").split("=")[0]: int(o.split("=", 1)[1]) for o in options if "=" in o
                  and o.lstrip("-").split("=")[0] in ("pairs", "atari-steps", "learning-starts")}
        device = next((o.split("=", 1)[1] for o in options if o.startswith("--device=")), "cpu")
        if device not in ("cpu", "cuda"):
            raise SystemExit(f"--device takes cpu or cuda, not {device!r}")
        atari(values.get("pairs", 2), values.get("atari-steps", 20_000), values.get("learning-starts", 1_000), device)
