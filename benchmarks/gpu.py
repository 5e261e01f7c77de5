"""One GPU check in one command, so that scarce minutes on a GPU machine go to measuring, not setting up:

    python -m benchmarks gpu --minutes 9 --out $OUT

in order, each part within what is left of `--minutes` (the whole stays under it):

1. the CUDA tests (the tests of tests/trainer named for a device in the files that have tests for a GPU, the slow
   ones left out);
2. every registered algorithm for a few thousand env steps on CUDA (CartPole, Pendulum or FrozenLake, as its
   spaces allow): steps per second, or the error;
3. Atari speed against stable-baselines3 on the GPU, interleaved (benchmarks/atari_speed.py): DQN (our `atari`
   preset on both sides) and PPO (RL Zoo's Atari settings, 8 envs), learning included;
4. PPO on ALE/Pong-v5 (sticky actions) for the minutes left, with CleanRL's settings that learn Pong in minutes
   (preset `cleanrl-envpool-fast`; `--pong-envs`, default one per core and at least 16), then a short greedy
   evaluation on the real game.

Everything goes under `--out` (default $OUT, else ./gpu-check): `summary.json` and `summary.md` (the figures for
docs/benchmarks.md), `tests.txt`, `pong-events.jsonl` (every event of the Pong run), `pong-curve.csv` and
`pong-curve.png` (training-episode returns by env steps and by minutes, with their mean over 20 episodes).
Without CUDA it says so and exits with status 3 at once, having run nothing.

On a device machine, whose image lacks Gymnasium, ale-py and stable-baselines3 and which reaches no registry:
`python -m benchmarks gpu --bundle` here first (their wheels into .whl/, benchmarks/_device_bundle.py), then there
`bash benchmarks/gpu_on_device.sh 9` with `.whl` carried. `--device cpu` rehearses the whole check on the CPU, with
the same code and small budgets, so that a GPU's minutes are not spent finding a broken part (its figures are not
GPU figures, and its summary says so).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

try:
    from trainer.events import Sink
except ImportError:  # trainer needs Gymnasium: missing_parts() says what is missing before anything runs
    Sink = object

NO_CUDA_STATUS = 3
NOT_READY_STATUS = 4  # something the check needs is missing here (benchmarks/_device_bundle.py carries it)
PONG = "ALE/Pong-v5"
ROOT = Path(__file__).resolve().parent.parent
EVAL_RESERVE_SECONDS = 60  # the Pong run stops this long before the deadline: evaluation, figures, summary
# where a run's wall time went, in percent (trainer/system_metrics.py's phases)
TIME_SPLIT = ("system/acting_percent", "system/env_percent", "system/update_percent", "system/other_percent")


def cuda_problem() -> str | None:
    """Why this machine cannot run the check (no CUDA build of torch, or no GPU it can see), or None."""
    import torch

    if not torch.cuda.is_available():
        build = "torch built without CUDA" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build"
        return (f"no CUDA GPU here (torch {torch.__version__}, {build}, torch.cuda.is_available() is False): "
                "python -m benchmarks gpu needs one")
    return None


def cpu_name() -> str:
    """The processor's model name (Linux), else what platform says."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        return platform.processor() or platform.machine()


def missing_parts(speed: bool = True) -> list[str]:
    """What the check needs and this Python cannot load, each with its error, found in seconds rather than after
    minutes of the check: the Atari env, stable-baselines3 (for the `speed` part), and every algorithm (a broken
    one is named)."""
    import importlib

    problems = []
    for module in ("gymnasium", "ale_py", *(("stable_baselines3",) if speed else ())):
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001  (said, with the others)
            problems.append(f"{module}: {type(error).__name__}: {error}")
    try:
        import trainer
        from trainer.registry import broken_algorithms

        trainer.algorithm_names()
        problems += [f"algorithm {broken.name}: {broken.error}" for broken in broken_algorithms()]
    except Exception as error:  # noqa: BLE001
        problems.append(f"trainer: {type(error).__name__}: {error}")
    return problems


class Clock:
    def __init__(self, minutes: float):
        self.started = time.monotonic()
        self.deadline = self.started + 60.0 * minutes

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def cuda_test_files() -> list[str]:
    """tests/trainer files with tests that only a GPU runs (they ask torch.cuda.is_available()), and the GPU path of
    the policy-gradient algorithms (test_device_rollouts.py); of them, the tests named for a device run."""
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests" / "trainer").glob("test_*.py")
                  if "cuda.is_available()" in path.read_text() or path.name == "test_device_rollouts.py")


def run_cuda_tests(out: Path, seconds: float) -> dict:
    files = cuda_test_files()
    command = [sys.executable, "-m", "pytest", *files, "-q", "-rs", "-p", "no:cacheprovider", "-m", "not slow",
               "-k", "cuda or gpu or device"]
    environment = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "DATABASE_URL")}
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=max(10.0, seconds),
                              env=environment)
        output, status = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as error:
        output, status = f"{error.stdout or ''}{error.stderr or ''}\ntimed out after {seconds:.0f} s", -1
    (out / "tests.txt").write_text(output if isinstance(output, str) else output.decode())
    last = [line for line in str(output).splitlines() if line.strip()][-1:] or [""]
    return {"files": files, "status": status, "passed": status == 0, "result": last[0],
            "seconds": round(time.monotonic() - started, 1)}


class Deadline(Sink):
    """A sink that asks the run to stop at `deadline` (time.monotonic()) and keeps what the run reports."""

    def __init__(self, deadline: float, path: Path | None = None, progress_every: float = 0.0):
        self.deadline = deadline
        self.file = open(path, "w") if path else None
        self.episodes: list[tuple[int, float, float]] = []  # (env step, seconds, return)
        self.last_time_event: dict = {}
        self.progress_every, self.next_progress = progress_every, time.monotonic() + progress_every

    def emit(self, event: dict) -> None:
        if self.file:
            self.file.write(json.dumps(event) + "\n")
        if event["kind"] == "episode":
            self.episodes.append((event["step"], event["time"], event["values"]["rollout/episode_return"]))
        elif event["kind"] == "time":
            self.last_time_event = event["values"]
        if self.progress_every and time.monotonic() >= self.next_progress:
            self.next_progress += self.progress_every
            recent = [r for _, _, r in self.episodes[-20:]]
            mean = f"{statistics.fmean(recent):+.1f}" if recent else "-"
            print(f"  {event['time']:6.0f} s  {event['step']:>10,} env steps  mean of last 20 episodes {mean}",
                  flush=True)

    def should_stop(self) -> bool:
        return time.monotonic() >= self.deadline

    def close(self) -> None:
        if self.file:
            self.file.close()


def env_for(spec) -> str | None:
    """A small env this algorithm trains on with its own defaults: CartPole, Pendulum or FrozenLake."""
    import trainer

    for env_id in ("CartPole-v1", "Pendulum-v1", "FrozenLake-v1"):
        try:
            trainer.validate(spec.name, env_id, {})
            return env_id
        except trainer.ConfigError:
            continue
    return None


def every_algorithm(steps: int, seconds_each: float, seconds: float, device: str = "cuda") -> list[dict]:
    import trainer

    rows, stop_all = [], time.monotonic() + seconds
    for name in trainer.algorithm_names():
        if time.monotonic() >= stop_all:
            rows.append({"algorithm": name, "status": "skipped: out of time"})
            continue
        spec = trainer.get_spec(name)
        env_id = env_for(spec)
        if env_id is None:
            rows.append({"algorithm": name, "status": "skipped: no small env for its spaces"})
            continue
        row = {"algorithm": name, "env_id": env_id}
        try:
            agent = trainer.make(name, env_id, seed=0, device=device)
            sink = Deadline(min(time.monotonic() + seconds_each, stop_all))
            started = time.perf_counter()
            summary = agent.learn(steps, sink=sink, eval_episodes=0)
            done = summary.get("steps", agent.steps_done)
            row.update(status="ok", device=str(agent.device), steps=int(done),
                       steps_per_second=round(done / (time.perf_counter() - started), 1))
        except Exception as error:  # noqa: BLE001  (one algorithm's failure is reported, the others still run)
            row.update(status=f"error: {type(error).__name__}: {str(error)[:300]}")
        print(f"  {name:<14} {row.get('env_id', ''):<14} {row['status']:<10} "
              f"{row.get('steps_per_second', '')} env steps/s", flush=True)
        rows.append(row)
    return rows


def pong(out: Path, seconds: float, envs: int, minibatches: int, eval_episodes: int, device: str = "cuda",
         eval_seconds: float = EVAL_RESERVE_SECONDS / 2) -> dict:
    import trainer
    from trainer.envs import cores

    envs = envs or max(16, cores())
    batch_size = max(1, envs * 128 // minibatches)
    agent = trainer.make("ppo", PONG, seed=0, device=device, preset="cleanrl-envpool-fast", num_envs=envs,
                         batch_size=batch_size)
    sink = Deadline(time.monotonic() + seconds, out / "pong-events.jsonl", progress_every=30.0)
    print(f"PPO on {PONG}: preset cleanrl-envpool-fast, {envs} envs, minibatches of {batch_size}, "
          f"{seconds / 60:.1f} minutes", flush=True)
    started = time.perf_counter()
    try:
        agent.learn(10_000_000, sink=sink, eval_episodes=0)  # CleanRL's 10M-step schedule, stopped by the clock
    finally:
        sink.close()
    trained_seconds = time.perf_counter() - started
    episodes = sink.episodes
    curve = []
    for index, (step, seconds_at, value) in enumerate(episodes):
        window = [r for _, _, r in episodes[max(0, index - 19):index + 1]]
        curve.append((step, seconds_at, value, statistics.fmean(window)))
    with open(out / "pong-curve.csv", "w") as file:
        file.write("env_step,seconds,episode_return,mean_last_20\n")
        file.writelines(f"{s},{t:.1f},{r:.0f},{m:.2f}\n" for s, t, r, m in curve)
    reached = next(((s, t) for s, t, _, m in curve if m >= 18 and len(curve) >= 20), None)
    evaluation = None
    if eval_episodes:  # one episode at a time, so that those finished count when the time runs out
        stop_at, returns = time.monotonic() + eval_seconds, []
        for episode in range(eval_episodes):
            played = agent.evaluate(1, seed=agent.seed + 1_000_003 + episode,
                                    should_stop=lambda: time.monotonic() >= stop_at)
            if played is None:
                break
            returns += played["returns"]
        evaluation = {"mean": statistics.fmean(returns), "returns": returns} if returns else None
    result = {"env_id": PONG, "preset": "cleanrl-envpool-fast", "num_envs": envs, "batch_size": batch_size,
              "env_steps": agent.steps_done, "seconds": round(trained_seconds, 1),
              "env_steps_per_second": round(agent.steps_done / trained_seconds, 1), "episodes": len(episodes),
              "mean_return_last_20": round(curve[-1][3], 2) if curve else None,
              "reached_18": {"env_step": reached[0], "seconds": reached[1]} if reached else None,
              "eval": None if evaluation is None else {"mean": evaluation["mean"], "returns": evaluation["returns"]},
              "time_split": {k.removeprefix("system/"): v for k, v in sink.last_time_event.items()
                             if k in TIME_SPLIT}}
    draw(curve, out / "pong-curve.png", "one GPU" if device == "cuda" else f"rehearsal on the {device}")
    return result


def draw(curve: list[tuple], path: Path, where: str = "one GPU") -> str:
    """The Pong curve by env steps and by minutes; plotly in Chromium as docs' other figures, else matplotlib."""
    if not curve:
        return "no episodes"
    steps, seconds, returns, means = zip(*curve)
    try:
        from plotly.subplots import make_subplots

        from benchmarks._figures import save_png

        figure = make_subplots(rows=1, cols=2, subplot_titles=("by env steps", "by minutes of training"))
        for column, x in ((1, steps), (2, [s / 60 for s in seconds])):
            figure.add_scatter(x=x, y=returns, mode="markers", marker=dict(size=3, color="#9ab"), name="episode",
                               showlegend=column == 1, row=1, col=column)
            figure.add_scatter(x=x, y=means, mode="lines", line=dict(color="#d62728"), name="mean of 20",
                               showlegend=column == 1, row=1, col=column)
            figure.add_hline(y=18, line_dash="dot", row=1, col=column)
        figure.update_layout(width=1000, height=380, title=f"PPO on {PONG} (sticky actions), {where}")
        save_png(figure, path, 1000, 380)
        return "plotly"
    except Exception:  # noqa: BLE001  (no plotly, playwright or Chromium on this machine: try matplotlib)
        pass
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot

        figure, axes = pyplot.subplots(1, 2, figsize=(10, 3.8))
        for axis, x, label in ((axes[0], steps, "env steps"), (axes[1], [s / 60 for s in seconds], "minutes")):
            axis.plot(x, returns, ".", color="#9ab", markersize=3)
            axis.plot(x, means, color="#d62728")
            axis.axhline(18, linestyle=":", color="k")
            axis.set_xlabel(label)
        figure.suptitle(f"PPO on {PONG} (sticky actions), {where}")
        figure.savefig(path, dpi=100, bbox_inches="tight")
        return "matplotlib"
    except Exception as error:  # noqa: BLE001
        return f"no figure: {error}"


def markdown(summary: dict) -> str:
    lines = [f"# GPU check: {summary['device']}, {summary['cpus']} CPUs, {summary['date']}", ""]
    if summary.get("rehearsal"):
        lines += [f"A rehearsal on the CPU ({summary['rehearsal']}): it shows that every part runs; its figures are "
                  "not GPU figures.", ""]
    tests = summary.get("tests")
    if tests:
        lines += [f"CUDA tests: {'passed' if tests['passed'] else 'FAILED'} ({tests['result']}; {tests['seconds']} s)",
                  ""]
    if summary.get("algorithms"):
        lines += ["| algorithm | env | status | env steps/s |", "|---|---|---|---|"]
        lines += [f"| {row['algorithm']} | {row.get('env_id', '')} | {row['status']} | "
                  f"{row.get('steps_per_second', '')} |" for row in summary["algorithms"]]
        lines.append("")
    for name, result in (summary.get("speed") or {}).items():
        lines.append(f"- {name} on {PONG} against stable-baselines3 on the {summary.get('on', 'GPU')}: "
                     f"{result['ratio']:.2f}x "
                     f"({statistics.median(result['rlweb']):,.0f} / {statistics.median(result['sb3']):,.0f} env "
                     f"steps/s; pairs {', '.join(f'{r:.2f}' for r in result['pair_ratios'])})")
    pong_result = summary.get("pong")
    if pong_result:
        reached = pong_result["reached_18"]
        lines += ["", f"PPO on {PONG}: {pong_result['env_steps']:,} env steps in {pong_result['seconds'] / 60:.1f} "
                      f"minutes ({pong_result['env_steps_per_second']:,.0f} env steps/s, {pong_result['num_envs']} "
                      f"envs); mean of the last 20 episodes {pong_result['mean_return_last_20']}; "
                  + (f"mean of 20 reached +18 at {reached['env_step']:,} env steps, {reached['seconds'] / 60:.1f} "
                     f"minutes" if reached else "mean of 20 did not reach +18")
                  + (f"; greedy evaluation {pong_result['eval']['returns']}" if pong_result.get("eval") else "")
                  + (f"; time split {pong_result['time_split']}" if pong_result.get("time_split") else "")]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu")
    parser.add_argument("--minutes", type=float, default=9.0, help="the whole check's wall time")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check"))
    parser.add_argument("--skip", nargs="*", default=[], choices=["tests", "algorithms", "speed", "pong"])
    parser.add_argument("--algorithm-steps", type=int, default=3_000)
    parser.add_argument("--pairs", type=int, default=1, help="interleaved pairs of each Atari speed comparison")
    parser.add_argument("--ppo-steps", type=int, default=16_384)
    parser.add_argument("--dqn-steps", type=int, default=8_000)
    parser.add_argument("--pong-envs", type=int, default=0, help="0: one per core, at least 16")
    parser.add_argument("--pong-minibatches", type=int, default=8)
    parser.add_argument("--pong-eval-episodes", type=int, default=3)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: a rehearsal of every part on the CPU (small budgets suit it), not GPU figures")
    parser.add_argument("--bundle", action="store_true",
                        help="instead of the check: the wheels a device machine lacks into .whl/, to carry there")
    parser.add_argument("--bundle-python", default=None, help="the device's Python version for --bundle (3.12)")
    args = parser.parse_args(argv)
    if args.bundle:
        from benchmarks import _device_bundle

        _device_bundle.main(args.bundle_python or _device_bundle.DEVICE_PYTHON)
        return
    rehearsal = args.device == "cpu"
    problem = None if rehearsal else cuda_problem()
    if problem:
        print(problem, file=sys.stderr, flush=True)
        raise SystemExit(NO_CUDA_STATUS)
    clock = Clock(args.minutes)
    problems = missing_parts(speed="speed" not in args.skip)
    if problems:
        print("the GPU check cannot run here (on a device machine, carry the wheels of `python -m benchmarks gpu "
              "--bundle`; benchmarks/gpu_on_device.sh installs them):\n  " + "\n  ".join(problems),
              file=sys.stderr, flush=True)
        raise SystemExit(NOT_READY_STATUS)
    import torch

    from trainer.envs import cores

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    summary = {"device": cpu_name() if rehearsal else torch.cuda.get_device_name(0),
               "cpus": cores(), "torch": torch.__version__, "on": "CPU" if rehearsal else "GPU",
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "minutes": args.minutes}
    if rehearsal:
        summary["rehearsal"] = f"python -m benchmarks gpu {' '.join(argv)}"
    eval_reserve = EVAL_RESERVE_SECONDS / (6 if rehearsal else 1)
    shortest_pong = 10.0 if rehearsal else 60.0  # a rehearsal's Pong run shows that it runs; a GPU's, how it learns

    def save():
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        (out / "summary.md").write_text(markdown(summary))

    print(f"GPU check on {summary['device']} ({summary['cpus']} CPUs), {args.minutes} minutes, into {out}", flush=True)
    if "tests" not in args.skip:
        print("== CUDA tests", flush=True)
        summary["tests"] = run_cuda_tests(out, min(150.0, 0.2 * clock.left()))
        print(f"  {summary['tests']['result']}", flush=True)
        save()
    if "algorithms" not in args.skip:
        print(f"== every algorithm, {args.algorithm_steps:,} env steps on {args.device}", flush=True)
        summary["algorithms"] = every_algorithm(args.algorithm_steps, 15.0, min(150.0, 0.2 * clock.left()),
                                                args.device)
        save()
    if "speed" not in args.skip:
        from benchmarks.atari_speed import compare

        print(f"== Atari speed against stable-baselines3 on the {summary['on']}", flush=True)
        summary["speed"] = compare(["dqn", "ppo"], args.pairs, args.device, args.ppo_steps, args.dqn_steps,
                                   min(1_000, args.dqn_steps // 2))
        save()
    if "pong" not in args.skip:
        seconds = clock.left() - eval_reserve
        if seconds < shortest_pong:
            summary["pong"] = None
            print(f"== no time left for PPO on Pong ({clock.left():.0f} s)", flush=True)
        else:
            print("== PPO on Pong for the minutes left", flush=True)
            summary["pong"] = pong(out, seconds, args.pong_envs, args.pong_minibatches, args.pong_eval_episodes,
                                   args.device, eval_reserve / 2)
        save()
    summary["seconds"] = round(clock.elapsed(), 1)
    save()
    print(markdown(summary), flush=True)
