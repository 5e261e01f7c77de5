"""A batch of points never exceeds the server's bound on a points request (`points_max_bytes` in its answers): the
client and `sync` size batches in bytes as well as in points, so points of many metrics go in smaller batches and
none is refused for its size."""

from __future__ import annotations

from tests.client.test_offline import sync

METRICS = [f"charts/metric_number_{number:02d}" for number in range(20)]
BOUND = 60_000  # bytes: about 60 points of 20 metrics


def values(step: int) -> dict:
    return {name: step + index / 7 for index, name in enumerate(METRICS)}


def test_batches_of_points_with_many_metrics_stay_under_the_servers_bound(server, start_run):
    server.points_max_bytes = BOUND
    run = start_run(flush_interval=5)
    for step in range(2000):
        run.log(values(step), step=step)
    run.finish()
    assert [point["seq"] for point in server.points()] == list(range(1, 2001))
    assert server.received_seqs == list(range(1, 2001))  # none sent twice
    assert max(server.points_body_sizes) <= BOUND
    assert len(server.points_body_sizes) >= 2000 * 900 // BOUND  # split by bytes, not by the thousand
    assert server.points()[1999]["values"] == values(1999)


def test_sync_sends_an_offline_run_in_batches_under_the_servers_bound(server, start_run):
    server.stop()
    run = start_run()
    for step in range(1500):
        run.log(values(step), step=step)
    run.finish()
    server.points_max_bytes = BOUND
    server.start()
    done = sync(server, run.offline_path.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [point["seq"] for point in server.points()] == list(range(1, 1501))
    assert max(server.points_body_sizes) <= BOUND
