import json
import subprocess
import sys
import zipfile

import pytest


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "trainer", *args], capture_output=True, text=True, timeout=timeout)


def test_list_prints_one_algorithm_per_line():
    result = run("list")
    assert result.returncode == 0
    assert "dqn" in [line.split()[0] for line in result.stdout.splitlines()]


def test_train_writes_final_zip_and_eval_prints_mean_and_std(tmp_path):
    result = run("train", "dqn", "CartPole-v1", "--total-steps", "400", "--seed", "1", "--out", str(tmp_path),
                 "--set", "learning_starts=100", "--set", "hidden_layers=32", "--eval-episodes", "2")
    assert result.returncode == 0, result.stderr
    assert "400/400" in result.stderr  # the progress bar
    assert zipfile.is_zipfile(tmp_path / "final.zip")
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[0]["kind"] == "started" and events[-1]["kind"] == "finished"

    result = run("eval", str(tmp_path / "final.zip"), "--episodes", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    scores = json.loads(lines[0])
    assert scores["episodes"] == 3 and len(scores["returns"]) == 3
    assert scores["mean"] == pytest.approx(sum(scores["returns"]) / 3)


@pytest.mark.parametrize("args, message", [
    (["train", "dqn", "Nope-v0", "--total-steps", "10", "--out", "x"], "Unknown environment id"),
    (["train", "dqn", "Pendulum-v1", "--total-steps", "10", "--out", "x"], "Discrete actions"),
    (["train", "dqn", "CartPole-v1", "--total-steps", "10", "--out", "x", "--set", "learning_rate=-1"],
     "learning_rate"),
    (["train", "dqn", "CartPole-v1", "--total-steps", "10", "--out", "x", "--set", "oops"], "KEY=VALUE"),
    (["eval", "missing.zip"], "missing.zip"),
    (["train", "dqn", "CartPole-v1", "--total-steps", "50000", "--out", "x", "--checkpoint-interval", "1"],
     "--checkpoint-interval must be 0 (off) or at least 50"),
    (["train", "dqn", "CartPole-v1", "--total-steps", "50000", "--out", "x", "--video-interval", "100"],
     "--video-interval must be 0 (off) or at least 250"),
])
def test_bad_input_is_a_one_line_error_not_a_traceback(args, message, tmp_path):
    result = subprocess.run([sys.executable, "-m", "trainer", *args], capture_output=True, text=True, cwd=tmp_path,
                            timeout=120)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
