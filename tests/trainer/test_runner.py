"""trainer.runner: counting steps, averaging training metrics, stopping, evaluations and the run's events.

Videos are in test_runner_video.py, failures in test_training_errors.py, cancel latency in
test_cancel_latency.py; here a stand-in agent keeps the runner's own behaviour in view.
"""

import math

import pytest
import torch

from trainer import runner as runner_module
from trainer.events import ListSink, Sink
from trainer.params import ConfigError
from trainer.params import MAX_CHECKPOINTS, MAX_VIDEOS, interval_errors
from trainer.runner import Runner, TrainingError, training_error


class CountingAgent:
    """What the runner needs of an agent: a step count, a clock, `train`, `evaluate`, `hyperparameters` and `notes`.
    `train` records `train/loss` = the step it is at, and advances one step at a time."""

    name, env_id, device, seed = "counting", "CartPole-v1", torch.device("cpu"), 3

    def __init__(self, eval_returns=(1.0, 5.0, 2.0)):
        self.steps_done, self.best_eval_return, self.seconds_trained, self.eval_due = 0, None, 0.0, False
        self.modules = {}
        self.eval_returns = list(eval_returns)
        self.evaluated_at: list[int] = []

    def hyperparameters(self) -> dict:
        return {"learning_rate": 0.1}

    def notes(self, total_steps: int | None = None) -> list[str]:
        return []

    def train(self, runner) -> None:
        while True:
            runner.record({"train/loss": runner.steps})
            if not runner.advance(1):
                return

    def evaluate(self, episodes, seed=None, env=None, should_stop=None):
        self.evaluated_at.append(self.steps_done)
        mean = self.eval_returns[min(len(self.evaluated_at), len(self.eval_returns)) - 1]
        return {"mean": mean, "std": 0.0, "length_mean": 10.0, "returns": [mean] * episodes}


class Flag(Sink):
    def __init__(self):
        self.stop, self.asked = False, 0

    def should_stop(self) -> bool:
        self.asked += 1
        return self.stop


def test_advance_counts_steps_and_says_stop_at_the_end_step():
    agent = CountingAgent()
    runner = Runner(agent, end_step=5, sink=ListSink())
    assert [runner.advance(1) for _ in range(4)] == [True] * 4
    assert runner.steps == 4 and runner.progress == pytest.approx(0.8)
    assert runner.advance(1) is False
    assert agent.steps_done == 5 and runner.progress == 1.0


def test_record_sends_the_mean_of_each_metric_every_log_interval():
    sink = ListSink()
    runner = Runner(CountingAgent(), end_step=100, sink=sink, log_interval=4)
    for step in range(8):
        runner.record({"train/loss": float(step), "train/q_mean": 10.0})
        runner.advance(1)
    events = sink.of_kind("train")
    assert [event["step"] for event in events] == [4, 8]
    assert events[0]["values"] == {"train/loss": 1.5, "train/q_mean": 10.0}  # mean of 0, 1, 2, 3
    assert events[1]["values"] == {"train/loss": 5.5, "train/q_mean": 10.0}


def test_a_loss_that_is_not_finite_ends_the_run_but_other_metrics_may_be():
    runner = Runner(CountingAgent(), end_step=100, sink=ListSink())
    runner.record({"train/q_mean": math.inf})  # not a loss: recorded as it is
    for key in ("train/loss", "train/td_error"):
        with pytest.raises(TrainingError, match=f"the loss became nan at step 0 \\({key}\\)"):
            runner.record({key: math.nan})


def test_should_stop_asks_the_sink_at_most_every_poll_interval_and_stays_stopped(monkeypatch):
    monkeypatch.setattr(runner_module, "STOP_POLL_SECONDS", 60.0)
    sink = Flag()
    runner = Runner(CountingAgent(), end_step=100, sink=sink)
    assert runner.should_stop() is False and sink.asked == 1
    sink.stop = True
    assert runner.should_stop() is False and sink.asked == 1  # not asked again within STOP_POLL_SECONDS
    runner._next_stop_poll = 0.0  # the poll interval has passed
    assert runner.should_stop() is True and sink.asked == 2
    sink.stop = False
    assert runner.should_stop() is True  # a stop is final
    assert runner.advance(1) is False


def test_a_run_reports_started_train_eval_and_finished_events_and_returns_a_summary():
    sink = ListSink()
    agent = CountingAgent()
    summary = Runner(agent, end_step=20, sink=sink, eval_interval=8, eval_episodes=2, log_interval=10).run()
    kinds = [event["kind"] for event in sink.events if event["kind"] != "time"]
    assert kinds == ["started", "eval", "train", "eval", "train", "eval", "finished"]
    assert agent.evaluated_at == [8, 16, 20]  # every eval_interval before the end, then a final evaluation
    started = sink.events[0]["values"]
    assert (started["algorithm"], started["seed"], started["start_step"], started["end_step"]) == ("counting", 3, 0, 20)
    assert started["hyperparameters"] == {"learning_rate": 0.1}
    assert summary["status"] == "succeeded" and summary["steps"] == 20
    assert summary["eval_return_mean"] == 2.0 and summary["best_eval_return"] == 5.0 == agent.best_eval_return
    assert summary["final_checkpoint"] is None  # no folder given
    assert sink.events[-1]["values"] == summary
    times = [event["time"] for event in sink.events]
    # the clock the agent keeps, the last event's time (which is rounded to 0.1 ms)
    assert times == sorted(times) and 0 < agent.seconds_trained <= times[-1] + 1e-4


def test_a_run_the_sink_stops_is_cancelled_without_a_final_evaluation(monkeypatch):
    monkeypatch.setattr(runner_module, "STOP_POLL_SECONDS", 0.0)  # ask the sink at every step
    sink = ListSink(stop_after=5)  # stops once an event (here the train event at step 5) reaches step 5
    agent = CountingAgent()
    summary = Runner(agent, end_step=1_000, sink=sink, log_interval=5, eval_episodes=2).run()
    assert summary["status"] == "cancelled" and summary["steps"] == 5
    assert agent.evaluated_at == [] and sink.of_kind("eval") == []
    assert sink.events[-1]["kind"] == "finished"


def test_a_resumed_run_keeps_its_best_evaluation_and_its_clock():
    agent = CountingAgent(eval_returns=(4.0,))
    agent.steps_done, agent.best_eval_return, agent.seconds_trained = 10, 7.0, 100.0
    sink = ListSink()
    summary = Runner(agent, end_step=12, sink=sink, eval_episodes=1).run()
    assert summary["eval_return_mean"] == 4.0 and summary["best_eval_return"] == 7.0  # 4 is no new best
    assert sink.events[0]["values"]["start_step"] == 10
    assert all(event["time"] >= 100.0 for event in sink.events)  # the clock goes on from the checkpoint's


def test_training_error_explains_running_out_of_memory_and_passes_others_on():
    error = training_error(MemoryError("no room"), 1234, "CartPole-v1")
    assert isinstance(error, TrainingError)
    assert str(error).startswith("out of memory at step 1,234 (MemoryError: no room)")
    same = TrainingError("already clear")
    assert training_error(same, 0, "CartPole-v1") is same
    assert training_error(KeyError("a bug"), 0, "CartPole-v1") is None


def test_intervals_that_would_make_too_many_checkpoints_or_videos_are_refused(tmp_path):
    assert interval_errors(50_000, 50, 250) == {} and interval_errors(50_000, 0, 0) == {}
    errors = interval_errors(50_000, 49, 249)
    assert errors["checkpoint_interval"].startswith("must be 0 (off) or at least 50:")
    assert errors["video_interval"].startswith("must be 0 (off) or at least 250:")
    assert interval_errors(3, 1, 1) == {}  # a short run may checkpoint every step
    with pytest.raises(ConfigError) as refused:
        Runner(CountingAgent(), end_step=10_000, checkpoint_interval=1, checkpoint_dir=tmp_path)
    assert set(refused.value.errors) == {"checkpoint_interval"}


def test_a_run_at_the_shortest_intervals_makes_at_most_the_most_checkpoints_and_videos():
    for total in (999, 1_000, 1_001, 50_000, 123_457):
        checkpoint = next(n for n in range(1, total + 1) if not interval_errors(total, checkpoint_interval=n))
        video = next(n for n in range(1, total + 1) if not interval_errors(total, video_interval=n))
        # periodic ones come before the end step, where the final one is written instead
        assert (total - 1) // checkpoint <= MAX_CHECKPOINTS and (total - 1) // video <= MAX_VIDEOS
        assert (total - 1) // (checkpoint - 1 or 1) >= MAX_CHECKPOINTS or checkpoint == 1


class SavingAgent(CountingAgent):
    def save(self, path):
        path.write_bytes(b"weights")
        return path


def test_a_run_cancelled_before_its_first_step_writes_no_checkpoint(tmp_path):
    sink = Flag()
    sink.stop = True  # asked to stop before training started
    summary = Runner(SavingAgent(), end_step=1_000, sink=sink, checkpoint_dir=tmp_path, checkpoint_interval=10).run()
    assert summary["status"] == "cancelled" and summary["steps"] == 0 and summary["final_checkpoint"] is None
    assert list(tmp_path.iterdir()) == []


def test_a_run_cancelled_after_it_trained_keeps_its_final_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setattr(runner_module, "STOP_POLL_SECONDS", 0.0)
    sink = ListSink(stop_after=5)
    summary = Runner(SavingAgent(), end_step=1_000, sink=sink, log_interval=5, checkpoint_dir=tmp_path).run()
    assert summary["status"] == "cancelled" and summary["final_checkpoint"] == str(tmp_path / "final.zip")
    assert [event["values"]["tag"] for event in sink.of_kind("checkpoint")] == ["final"]
