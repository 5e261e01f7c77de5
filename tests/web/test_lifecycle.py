"""Lost runs: the lost-run reaper and a restarted worker's reclaim mark them lost, and they resume by themselves from their
latest checkpoint, up to the experiment's limit; then they end failed with their error."""

import json
from datetime import timedelta

from django.utils import timezone

from rlweb.experiments import lifecycle, redis_keys
from rlweb.experiments.models import Run
from rlweb.experiments.tasks import PROCESS_STARTED, reclaim_runs, train_run
from tests.web.helpers import register_idle_workers


def running(run, heartbeat_seconds_ago: float = 0, worker: str = "celery@box", **fields) -> Run:
    now = timezone.now()
    Run.objects.filter(pk=run.pk).update(status="running", attempts=1, started_at=now - timedelta(hours=1),
                                         first_started_at=now - timedelta(hours=1), worker_node=worker,
                                         heartbeat_at=now - timedelta(seconds=heartbeat_seconds_ago), **fields)
    run.refresh_from_db()
    return run


def queued_messages(live_redis) -> list[int]:
    """The run ids of the task messages waiting in the cpu queue."""
    from base64 import b64decode

    return [json.loads(b64decode(json.loads(raw)["body"]))[0][0] for raw in live_redis.lrange("cpu", 0, -1)]


def test_a_lost_run_is_queued_again_by_itself_and_trains_on_from_its_checkpoint(
        trained_run, settings, live_redis, django_capture_on_commit_callbacks):
    final = trained_run.checkpoints.get(tag="final")
    run = running(trained_run, heartbeat_seconds_ago=settings.HEARTBEAT_TIMEOUT + 1, steps_done=final.step)
    register_idle_workers("cpu")
    with django_capture_on_commit_callbacks(execute=True):
        assert lifecycle.reap_lost_runs() == 1
    run.refresh_from_db()
    assert run.status == "queued" and run.resume_requested and run.auto_resumes == 1
    assert queued_messages(live_redis) == [run.pk]
    assert train_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.attempts == 2 and run.start_step == final.step and run.error == ""


def test_a_run_lost_again_and_again_ends_failed_at_the_experiments_limit(queued_run, settings,
                                                                         django_capture_on_commit_callbacks):
    queued_run.experiment.max_auto_resumes = 2
    queued_run.experiment.save()
    statuses = []
    for attempt in range(3):
        run = running(queued_run, heartbeat_seconds_ago=settings.HEARTBEAT_TIMEOUT + 1)
        with django_capture_on_commit_callbacks(execute=True):
            assert lifecycle.reap_lost_runs() == 1
        run.refresh_from_db()
        statuses.append((run.status, run.auto_resumes))
    assert statuses == [("queued", 1), ("queued", 2), ("failed", 2)]
    assert "stopped sending heartbeats" in run.error and "2 times" in run.error


def test_a_lost_run_stays_lost_when_its_experiment_does_not_resume_by_itself(queued_run, settings):
    queued_run.experiment.auto_resume = False
    queued_run.experiment.save()
    running(queued_run, heartbeat_seconds_ago=settings.HEARTBEAT_TIMEOUT + 1)
    assert lifecycle.reap_lost_runs() == 1
    queued_run.refresh_from_db()
    assert queued_run.status == "lost" and queued_run.is_resumable


def test_a_resume_by_hand_gives_the_run_its_automatic_resumes_again(queued_run, settings,
                                                                    django_capture_on_commit_callbacks):
    run = running(queued_run, heartbeat_seconds_ago=settings.HEARTBEAT_TIMEOUT + 1, auto_resumes=3)
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.reap_lost_runs()
    run.refresh_from_db()
    assert run.status == "failed"
    Run.objects.filter(pk=run.pk).update(status="cancelled")
    with django_capture_on_commit_callbacks(execute=True):
        assert lifecycle.resume(run)
    run.refresh_from_db()
    assert run.status == "queued" and run.auto_resumes == 0


def test_a_starting_worker_reclaims_at_once_the_runs_its_earlier_incarnation_held(
        make_experiment, live_redis, django_capture_on_commit_callbacks):
    experiment = make_experiment()

    def run(worker, claimed_at):
        made = Run.objects.create(experiment=experiment, total_steps=100)
        made = running(made, worker=worker)  # a fresh heartbeat: the reaper would wait for the timeout
        Run.objects.filter(pk=made.pk).update(started_at=claimed_at, worker_host=lifecycle.socket.gethostname())
        return made

    before = PROCESS_STARTED - timedelta(seconds=60)  # claimed by the incarnation before this process
    held, other_worker, claimed_since = run("celery@box", before), run("celery@other", before), run(
        "celery@box", timezone.now())
    assert lifecycle.reap_lost_runs() == 0

    class Consumer:  # what Celery's worker_ready signal passes: the consumer of the worker that started
        hostname = "celery@box"

    register_idle_workers("cpu")
    with django_capture_on_commit_callbacks(execute=True):
        reclaim_runs(sender=Consumer())
    statuses = dict(Run.objects.values_list("pk", "status"))
    assert statuses == {held.pk: "queued", other_worker.pk: "running", claimed_since.pk: "running"}
    assert queued_messages(live_redis) == [held.pk]
    held.refresh_from_db()
    assert held.auto_resumes == 1 and held.resume_requested


def test_a_run_of_another_host_with_the_same_node_name_is_not_reclaimed(make_experiment):
    run = Run.objects.create(experiment=make_experiment(), total_steps=100)
    running(run, worker="celery@box", worker_host="another-machine")
    assert lifecycle.reclaim("celery@box", started_before=timezone.now()) == 0
    run.refresh_from_db()
    assert run.status == "running"


def test_a_stop_key_left_from_before_a_resume_does_not_stop_the_next_attempt(trained_run, live_redis,
                                                                            django_capture_on_commit_callbacks):
    Run.objects.filter(pk=trained_run.pk).update(status="cancelled")
    trained_run.checkpoints.all().delete()  # it starts over: it has all its steps to train
    with django_capture_on_commit_callbacks(execute=True):
        assert lifecycle.resume(trained_run)
    live_redis.set(redis_keys.stop_key(trained_run.pk), "1")  # as if Redis had been down at the resume
    assert train_run(trained_run.pk) == "succeeded"
