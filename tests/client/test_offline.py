"""A run the server cannot take goes on in an offline file, which `python -m rlweb_client sync DIR` uploads once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.client.conftest import CLIENT


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def sync(server, folder, *more) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlweb_client", "sync", str(folder), *more], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_URL": server.url,
                                                       "RLWEB_TOKEN": server.token})


def test_a_server_unreachable_at_init_writes_the_whole_run_to_the_offline_file(server, start_run, tmp_path, capfd):
    server.stop()
    video = tmp_path / "episode.mp4"
    video.write_bytes(b"frames")
    run = start_run(name="seed 1")
    assert run.url is None and run.id is None
    for step in range(1500):
        run.log({"charts/episodic_return": step}, step=step)
    run.log_video(video, step=1499)
    run.finish()
    video.unlink()  # the offline folder holds a copy
    lines = records(run.offline_path)
    assert lines[0]["op"] == "init" and lines[0]["experiment"] == "ppo-cartpole" and lines[0]["name"] == "seed 1"
    assert lines[0]["server"] == server.url and server.token not in run.offline_path.read_text()
    assert [point["seq"] for line in lines if line["op"] == "points" for point in line["points"]] == list(
        range(1, 1501))
    assert [line["op"] for line in lines[-2:]] == ["file", "finish"]
    assert (run.offline_path.parent / lines[-2]["path"]).read_bytes() == b"frames"
    assert lines[-1] == {"op": "finish", "status": "succeeded", "last_seq": 1500}
    errors = capfd.readouterr().err
    assert errors.count("python -m rlweb_client sync") == 1, errors


def test_sync_uploads_an_offline_run_and_a_second_sync_sends_nothing(server, start_run, tmp_path):
    server.stop()
    video = tmp_path / "episode.mp4"
    video.write_bytes(b"frames")
    run = start_run(config={"seed": 3})
    for step in range(2500):
        run.log({"charts/episodic_return": step}, step=step)
    run.log_video(video, step=2499)
    run.finish("failed", error="diverged")
    server.start()
    first = sync(server, run.offline_path.parent)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "created run 1" in first.stdout and "points stored through 2500 (of 2500)" in first.stdout
    stored = server.runs[1]
    assert stored["init"]["config"] == {"seed": 3} and stored["init"]["host"]
    assert [point["seq"] for point in stored["points"]] == list(range(1, 2501))
    assert stored["files"] == [{"kind": "video", "step": 2499, "content": b"frames"}]
    assert stored["finish"] == {"status": "failed", "last_seq": 2500, "error": "diverged"}
    posts = len(server.posts())
    second = sync(server, run.offline_path.parent)
    assert second.returncode == 0 and "already synced (run 1)" in second.stdout
    assert len(server.posts()) == posts and len(server.runs) == 1


def test_an_interrupted_sync_run_again_sends_nothing_twice(server, start_run):
    server.stop()
    run = start_run()
    for step in range(2500):
        run.log({"x": step}, step=step)
    run.log_checkpoint(__file__, step=2500)
    run.finish()
    server.start()
    server.unavailable_after_points = 1  # the server goes down after the first batch of the sync
    first = sync(server, run.offline_path.parent)
    assert first.returncode == 1 and "run the same command again later" in first.stdout
    assert len(server.points()) == 1000
    server.mode = "normal"
    server.unavailable_after_points = None
    second = sync(server, run.offline_path.parent)
    assert second.returncode == 0, second.stdout
    assert len(server.runs) == 1 and len(server.posts("/api/logged-runs")) == 1
    assert [point["seq"] for point in server.points()] == list(range(1, 2501))
    assert max(server.received_seqs.count(seq) for seq in range(1, 2501)) == 1, "no point was sent twice"
    assert len(server.runs[1]["files"]) == 1 and server.runs[1]["status"] == "succeeded"


def test_a_server_down_longer_than_the_bound_sends_the_rest_to_the_offline_file(server, start_run, capfd):
    run = start_run(offline_after=1)
    for step in range(100):
        run.log({"x": step}, step=step)
    server.wait_for_points(100)
    server.stop()
    for step in range(100, 200):
        run.log({"x": step}, step=step)
    deadline = time.monotonic() + 5
    while run.offline_path is None:
        assert time.monotonic() < deadline, "the run did not go offline"
        time.sleep(0.05)
    for step in range(200, 300):
        run.log({"x": step}, step=step)
    run.finish()
    lines = records(run.offline_path)
    assert lines[1] == {"op": "synced", "run_id": 1}
    assert [point["seq"] for line in lines if line["op"] == "points" for point in line["points"]] == list(
        range(101, 301))
    assert "cannot reach" in capfd.readouterr().err
    server.start()
    assert sync(server, run.offline_path.parent).returncode == 0
    assert [point["seq"] for point in server.points()] == list(range(1, 301))
    assert server.runs[1]["status"] == "succeeded" and len(server.runs) == 1


def test_more_points_waiting_than_the_bound_go_to_the_offline_file(server, start_run):
    run = start_run(max_pending=1000)
    server.mode = "unavailable"
    for step in range(5000):
        run.log({"x": step}, step=step)
    run.finish(timeout=10)
    assert run.offline_path is not None
    lines = records(run.offline_path)
    assert [point["seq"] for line in lines if line["op"] == "points" for point in line["points"]] == list(
        range(1, 5001))


def test_finish_gives_up_after_its_timeout_and_keeps_the_rest_in_the_offline_file(server, start_run):
    run = start_run()
    server.mode = "unavailable"
    for step in range(5):
        run.log({"x": step}, step=step)
    started = time.monotonic()
    run.finish(timeout=1)
    assert time.monotonic() - started < 5  # not the minute (offline_after) a finish that ignored its timeout would take
    lines = records(run.offline_path)
    assert [line["op"] for line in lines] == ["init", "synced", "points", "finish"]
    assert [point["seq"] for point in lines[2]["points"]] == [1, 2, 3, 4, 5]
