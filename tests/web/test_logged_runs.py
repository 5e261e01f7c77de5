"""Runs logged from a user's own script through the API (/api/logged-runs, rlweb/logged/runs.py), with a real
token, database and Redis: create, points (repeats dropped, order kept, NaN and bad names noted), files (quota,
size), finish, strangers, the run page, the compare page, and what the lost-run reaper does with a silent one."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from rlweb.api.models import ApiToken
from rlweb.experiments import lifecycle
from rlweb.experiments.models import LOGGED, Checkpoint, Event, Experiment, Run, StorageQuota, Video
from rlweb.experiments.redis_keys import redis_client, stream_key
from rlweb.logged.models import LoggedRun

INIT = {"experiment": "ppo-pong-ablation", "name": "baseline", "config": {"env_id": "PongNoFrameskip-v4",
        "learning_rate": 0.00025, "total_timesteps": 10_000}, "host": "lab-gpu-3",
        "command": "python ppo_atari.py --seed 1", "git_commit": "3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345",
        "client_version": "0.1.0"}


class Api:
    """A client of the JSON API that sends a user's bearer token."""

    def __init__(self, user):
        _, self.token = ApiToken.issue(user, "test script")
        self.client = Client()

    def post(self, path: str, body: dict | str):
        text = body if isinstance(body, str) else json.dumps(body)
        return self.client.post(path, text, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {self.token}")

    def get(self, path: str):
        return self.client.get(path, HTTP_AUTHORIZATION=f"Bearer {self.token}")

    def upload(self, run_id: int, kind: str, step: int, content: bytes, name: str = "file.bin"):
        return self.client.post(f"/api/logged-runs/{run_id}/files",
                                {"kind": kind, "step": str(step), "file": SimpleUploadedFile(name, content)},
                                HTTP_AUTHORIZATION=f"Bearer {self.token}")

    def create(self, **overrides) -> int:
        answer = self.post("/api/logged-runs", {**INIT, **overrides})
        assert answer.status_code == 201, answer.content
        return answer.json()["id"]

    def points(self, run_id: int, points: list[dict]):
        return self.post(f"/api/logged-runs/{run_id}/points", {"points": points})


def point(seq: int, **values) -> dict:
    return {"seq": seq, "step": 100 * seq, "time": 0.5 * seq, "values": values}


@pytest.fixture
def api(owner):
    return Api(owner)


@pytest.fixture
def stranger_api(stranger):
    return Api(stranger)


def drawn(owner_client, run_id: int) -> dict:
    """The metrics the run page draws first (history.json)."""
    return owner_client.get(reverse("run-history", args=[run_id])).json()["metrics"]


def test_a_script_creates_a_running_run_of_a_logged_experiment_with_its_facts(api, owner):
    answer = api.post("/api/logged-runs", INIT)
    assert answer.status_code == 201
    body = answer.json()
    run = Run.objects.select_related("experiment").get(pk=body["id"])
    assert body == {"id": run.pk, "experiment_id": run.experiment_id, "next_seq": 1,
                    "url": f"http://testserver/runs/{run.pk}/", "points_max_bytes": 16 * 1024 * 1024}
    assert run.status == Run.Status.RUNNING and run.heartbeat_at is not None
    assert run.experiment.owner == owner and run.experiment.algorithm == LOGGED and run.experiment.is_logged
    assert run.experiment.env_id == "PongNoFrameskip-v4" and not run.experiment.auto_resume
    assert run.total_steps == 10_000
    logged = LoggedRun.objects.get(run=run)
    assert (logged.host, logged.command, logged.git_commit, logged.client_version, logged.name) == (
        "lab-gpu-3", "python ppo_atari.py --seed 1", INIT["git_commit"], "0.1.0", "baseline")
    assert logged.config == INIT["config"] and logged.stored_through == 0
    assert api.get(f"/api/logged-runs/{run.pk}").json() == {
        "id": run.pk, "status": "running", "stored_through": 0, "url": f"http://testserver/runs/{run.pk}/",
        "points_max_bytes": 16 * 1024 * 1024}


def test_a_second_run_of_the_same_name_joins_its_experiment_with_the_next_seed(api, make_experiment):
    trained = make_experiment(name=INIT["experiment"])  # a trained experiment of that name is left alone
    first, second = api.create(), api.create()
    runs = Run.objects.filter(pk__in=[first, second]).order_by("pk")
    assert runs[0].experiment_id == runs[1].experiment_id != trained.pk
    assert [run.seed for run in runs] == [0, 1]
    assert Experiment.objects.get(pk=runs[0].experiment_id).num_seeds == 2


def test_a_run_takes_its_scripts_seed_unless_another_run_of_the_experiment_has_it(api):
    seeded = lambda seed: {"config": {**INIT["config"], "seed": seed}}  # noqa: E731
    runs = [api.create(**seeded(1)), api.create(**seeded(3)), api.create(**seeded(1)), api.create(),
            api.create(**seeded(True)), api.create(**seeded(-2)), api.create(**seeded("7"))]
    assert [Run.objects.get(pk=run).seed for run in runs] == [1, 3, 4, 5, 6, 7, 8]
    first = api.get(f"/api/runs/{runs[0]}").json()
    assert first["seed"] == 1


def test_points_go_through_the_push_path_and_every_metric_name_is_drawn(api, owner_client):
    run_id = api.create()
    answer = api.points(run_id, [point(1, **{"charts/episodic_return": 1.0, "losses/value_loss": 0.5}),
                                 point(2, **{"charts/episodic_return": 3.0, "my metric": 7}),
                                 point(3, **{"eval/return_mean": 2.0, "eval/return_std": 0.5})])
    assert answer.status_code == 200 and answer.json() == {"stored_through": 3, "dropped": []}
    metrics = drawn(owner_client, run_id)
    assert metrics["charts/episodic_return"]["value"] == [1.0, 3.0]
    assert metrics["charts/episodic_return"]["step"] == [100, 200]
    assert metrics["losses/value_loss"]["value"] == [0.5] and metrics["my metric"]["value"] == [7.0]
    assert metrics["eval/return_mean"]["low"] == [1.5]  # drawn with its band, as a trained run's evaluation
    kinds = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("kind", flat=True))
    assert kinds == ["started", "train", "train", "eval"]
    live = [json.loads(fields["event"]) for _, fields in redis_client().xrange(stream_key(run_id))]
    assert [record["seq"] for record in live] == [1, 2, 3, 4]  # the live stream has them, with the rows' seqs
    run = Run.objects.get(pk=run_id)
    assert run.steps_done == 300 and run.eval_return_mean is None


def test_a_point_sent_twice_is_stored_once_and_the_order_is_kept(api, owner_client):
    run_id = api.create()
    api.points(run_id, [point(seq, loss=float(seq)) for seq in (1, 2, 3)])
    answer = api.points(run_id, [point(seq, loss=float(seq)) for seq in (2, 3, 4, 5)])  # a retry, and two more
    assert answer.json()["stored_through"] == 5
    assert [item["seq"] for item in answer.json()["dropped"]] == [2, 3]
    assert "repeat" in answer.json()["dropped"][0]["reason"]
    assert api.points(run_id, [point(seq, loss=float(seq)) for seq in (1, 2)]).json()["stored_through"] == 5
    assert drawn(owner_client, run_id)["loss"]["value"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert Event.objects.filter(run_id=run_id, kind="train").count() == 5
    assert api.get(f"/api/logged-runs/{run_id}").json()["stored_through"] == 5


def test_nan_and_infinity_are_dropped_per_value_with_a_note(api, owner_client):
    run_id = api.create()
    body = json.dumps({"points": [point(1, loss=float("nan"), reward=2.0), point(2, loss=float("inf"))]})
    assert "NaN" in body  # what Python's json sends for them
    answer = api.post(f"/api/logged-runs/{run_id}/points", body)
    assert answer.status_code == 200
    assert answer.json()["stored_through"] == 2
    dropped = answer.json()["dropped"]
    assert [item["seq"] for item in dropped] == [1, 2]
    assert "'loss': nan is not a finite number" in dropped[0]["reason"] and "inf" in dropped[1]["reason"]
    metrics = drawn(owner_client, run_id)
    assert metrics["reward"]["value"] == [2.0] and "loss" not in metrics


def test_bad_names_and_values_that_are_not_numbers_are_refused_per_value(api, owner_client):
    run_id = api.create()
    answer = api.points(run_id, [point(1, **{"ok/name": 1.0, "x" * 201: 1.0, "bad<name>": 1.0, "text": "high",
                                             "flag": True, "huge": 10**400})])
    reasons = " | ".join(item["reason"] for item in answer.json()["dropped"])
    assert len(answer.json()["dropped"]) == 5
    assert "a metric name is 1 to 200" in reasons and "'bad<name>'" in reasons
    assert "'text': not a number (str)" in reasons and "'flag': not a number (bool)" in reasons
    assert "'huge': larger than" in reasons
    assert list(drawn(owner_client, run_id)) == ["ok/name"]


@pytest.mark.parametrize("points, field", [
    ([point(2, a=1.0), point(2, a=2.0)], "points"),  # seqs must increase within a request
    ([{**point(1, a=1.0), "seq": 0}], "seq"),
    ([{**point(1, a=1.0), "step": -1}], "step"),
    ([{**point(1, a=1.0), "extra": 1}], "extra"),
    ([point(seq, a=1.0) for seq in range(1, 5_002)], "points"),
])
def test_requests_that_break_the_protocol_get_422_naming_the_field(api, points, field):
    run_id = api.create()
    answer = api.points(run_id, points)
    assert answer.status_code == 422
    assert field in json.dumps(answer.json()["detail"])
    assert LoggedRun.objects.get(pk=run_id).stored_through == 0


def test_a_points_body_with_an_unknown_field_or_a_time_that_is_not_finite_gets_422_naming_it(api):
    run_id = api.create()
    answer = api.post(f"/api/logged-runs/{run_id}/points", {"points": [point(1, a=1.0)], "tags": ["x"]})
    assert answer.status_code == 422 and "tags" in json.dumps(answer.json()["detail"])
    answer = api.post(f"/api/logged-runs/{run_id}/points", '{"points": [{"seq": 1, "step": 0, "time": NaN, '
                                                            '"values": {"a": 1.0}}]}')
    assert answer.status_code in (400, 422) and LoggedRun.objects.get(pk=run_id).stored_through == 0


def test_videos_and_checkpoints_are_stored_like_the_trainers_and_downloaded_from_the_pages(api, owner_client):
    run_id = api.create()
    video = api.upload(run_id, "video", 300, b"\x00\x00\x00\x18ftypmp42", "episode.mp4")
    checkpoint = api.upload(run_id, "checkpoint", 400, b"weights", "agent.pt")
    assert video.status_code == checkpoint.status_code == 201
    stored_video = Video.objects.get(pk=video.json()["id"], run_id=run_id)
    stored_checkpoint = Checkpoint.objects.get(pk=checkpoint.json()["id"], run_id=run_id)
    assert stored_video.size == 12 and stored_video.step == 300
    assert stored_checkpoint.size == 7 and stored_checkpoint.file.name.endswith("step_400.pt")
    download = owner_client.get(reverse("checkpoint-download", args=[stored_checkpoint.pk]))
    assert b"".join(download.streaming_content) == b"weights"
    assert owner_client.get(reverse("video-file", args=[stored_video.pk])).status_code == 200
    history = owner_client.get(reverse("run-history", args=[run_id])).json()
    assert [item["id"] for item in history["videos"]] == [stored_video.pk]
    assert [item["id"] for item in history["checkpoints"]] == [stored_checkpoint.pk]
    log = {event["kind"]: event["values"] for event in history["log"]}
    assert log["checkpoint"]["checkpoint_id"] == stored_checkpoint.pk and log["video"]["video_id"] == stored_video.pk


def test_a_file_past_the_storage_quota_or_the_size_limit_is_refused_clearly(api, owner, settings):
    run_id = api.create()
    StorageQuota.objects.create(user=owner, megabytes=1)
    assert api.upload(run_id, "checkpoint", 1, b"x" * 600_000).status_code == 201
    answer = api.upload(run_id, "checkpoint", 2, b"x" * 600_000)
    assert answer.status_code == 413 and "storage quota of 1.0 MB" in answer.json()["detail"]
    settings.LOGGED_FILE_MAX_MB = 0
    answer = api.upload(run_id, "video", 3, b"x")
    assert answer.status_code == 413 and "files may take 0 bytes each" in answer.json()["detail"]
    assert Checkpoint.objects.filter(run_id=run_id).count() == 1 and not Video.objects.exists()


def test_finish_ends_the_run_once_and_later_points_and_files_answer_409(api, owner_client):
    run_id = api.create()
    api.points(run_id, [point(1, loss=1.0)])
    answer = api.post(f"/api/logged-runs/{run_id}/finish", {"status": "succeeded", "last_seq": 1})
    assert answer.status_code == 200 and answer.json() == {"status": "succeeded"}
    again = api.post(f"/api/logged-runs/{run_id}/finish", {"status": "failed", "last_seq": 1, "error": "late"})
    assert again.json() == {"status": "succeeded"}  # idempotent: it keeps how it ended
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.SUCCEEDED and run.finished_at is not None
    assert Event.objects.filter(run_id=run_id, kind="finished").count() == 1
    assert api.points(run_id, [point(2, loss=2.0)]).status_code == 409
    assert api.upload(run_id, "video", 5, b"x").status_code == 409
    assert LoggedRun.objects.get(pk=run_id).stored_through == 1


def test_a_failed_finish_records_its_error_and_notes_points_that_never_came(api):
    run_id = api.create()
    api.points(run_id, [point(1, loss=1.0)])
    api.post(f"/api/logged-runs/{run_id}/finish", {"status": "failed", "last_seq": 4, "error": "CUDA out of memory"})
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.FAILED and run.error == "CUDA out of memory"
    failed = Event.objects.get(run_id=run_id, kind="failed")
    assert failed.values["missing"] == "points 2 to 4 never arrived"


def test_a_strangers_token_gets_404_on_the_run_and_a_trained_run_is_not_a_logged_one(api, stranger_api, owner,
                                                                                     make_experiment):
    run_id = api.create()
    trained = Run.objects.create(experiment=make_experiment(), total_steps=10, status=Run.Status.RUNNING)
    for target in (run_id, trained.pk):
        client = stranger_api if target == run_id else api
        assert client.get(f"/api/logged-runs/{target}").status_code == 404
        assert client.points(target, [point(1, loss=1.0)]).status_code == 404
        assert client.upload(target, "video", 1, b"x").status_code == 404
        assert client.post(f"/api/logged-runs/{target}/finish", {"status": "succeeded"}).status_code == 404
    assert not Event.objects.filter(run_id=run_id, kind="train").exists()
    assert Run.objects.get(pk=run_id).status == Run.Status.RUNNING


def test_a_request_without_a_valid_token_is_refused_with_401():
    answer = Client().post("/api/logged-runs", json.dumps(INIT), content_type="application/json",
                           HTTP_AUTHORIZATION="Bearer rlw_0000000000_nope")
    assert answer.status_code == 401 and not Run.objects.exists()


def test_the_run_page_shows_where_a_logged_run_came_from_and_offers_no_trainer_actions(api, owner_client):
    run_id = api.create()
    api.points(run_id, [point(1, **{"charts/episodic_return": 5.0})])
    page = owner_client.get(reverse("run-detail", args=[run_id]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "logged from lab-gpu-3: <code>python ppo_atari.py --seed 1</code>, commit" in text
    assert INIT["git_commit"][:12] in text
    assert "learning_rate" in text  # its config, under Hyperparameters
    assert 'id="resume-form"' not in text and 'id="live-change-form"' not in text
    assert "<code>run.log_checkpoint(path, step)</code>" in text and "<code>run.log_video(path, step)</code>" in text
    experiment_page = owner_client.get(reverse("experiment-detail", args=[Run.objects.get(pk=run_id).experiment_id]))
    assert 'id="clone-link"' not in experiment_page.content.decode()


def test_a_logged_runs_pages_show_its_scripts_config_and_episode_returns_not_the_trainers_settings(api, owner_client):
    first = api.create(config={**INIT["config"], "seed": 1})
    second = api.create(config={**INIT["config"], "seed": 2, "clip_coef": 0.1})
    api.points(first, [point(1, **{"charts/episodic_return": 5.0}), point(2, **{"charts/episodic_return": 9.0}),
                       point(3, **{"charts/episodic_return": 2.0, "losses/value_loss": 0.1}),
                       point(4, **{"losses/value_loss": 0.2})])
    history = owner_client.get(reverse("run-history", args=[first])).json()
    assert history["last_episode_return"] == 2.0 and max(history["metrics"]["charts/episodic_return"]["value"]) == 9.0
    text = owner_client.get(reverse("run-detail", args=[first])).content.decode()
    assert 'id="last-episode-return"' in text and 'id="best-episode-return"' in text and 'id="eval-return"' not in text
    config = text[text.index('id="run-config"'):text.index('id="run-hyperparameters"')]
    assert "<dt>Host</dt><dd>lab-gpu-3</dd>" in config
    assert "Eval interval" not in config and "Device asked for" not in config and "<dt>Algorithm</dt>" not in config
    experiment = Run.objects.get(pk=first).experiment_id
    page = owner_client.get(reverse("experiment-detail", args=[experiment])).content.decode()
    card = page[page.index('id="logged-config"'):]
    assert "<dt>learning_rate</dt><dd><code>0.00025</code></dd>" in card
    assert '<dt>seed</dt><dd><span class="muted">differs between runs</span></dd>' in card
    assert '<dt>clip_coef</dt><dd><span class="muted">differs between runs</span></dd>' in card  # one run lacks it
    assert "eval_interval" not in page and "Eval return" not in page and "(logged)" not in page
    assert f'data-run-id="{first}">Run {first}</a> <span class="muted">baseline</span>' in page  # its label
    assert Experiment.objects.get(pk=experiment).description == ""  # the heading says where its runs come from


def test_the_stock_description_of_older_logged_experiments_is_taken_off_and_a_users_own_kept(api):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("rlweb.logged.migrations.0002_no_stock_description")
    stock = Experiment.objects.get(pk=Run.objects.get(pk=api.create()).experiment_id)
    own = Experiment.objects.get(pk=Run.objects.get(pk=api.create(experiment="other")).experiment_id)
    Experiment.objects.filter(pk=stock.pk).update(description=migration.STOCK)
    Experiment.objects.filter(pk=own.pk).update(description="Ablation of the clip range.")
    migration.forget_stock_description(apps, None)
    assert Experiment.objects.get(pk=stock.pk).description == ""
    assert Experiment.objects.get(pk=own.pk).description == "Ablation of the clip range."


def test_the_compare_page_draws_a_logged_run_beside_a_trained_one(api, owner_client, make_experiment):
    run_id = api.create()
    api.points(run_id, [point(seq, **{"rollout/episode_return": float(seq)}) for seq in (1, 2)])
    trained = Run.objects.create(experiment=make_experiment(), total_steps=400, status=Run.Status.SUCCEEDED)
    Event.objects.create(run=trained, seq=1, kind="episode", step=50, time=1.0,
                         values={"rollout/episode_return": 9.0})
    from rlweb.experiments.history import rebuild_summary

    rebuild_summary(trained.pk)
    runs = f"{run_id},{trained.pk}"
    assert owner_client.get(reverse("compare"), {"runs": runs}).status_code == 200
    data = owner_client.get(reverse("compare-data"), {"runs": runs}).json()
    metric = next(metric for metric in data["metrics"] if metric["key"] == "rollout/episode_return")
    assert metric["runs"][str(run_id)]["value"] == [1.0, 2.0]


def test_the_compare_page_diffs_the_configs_logged_runs_sent_not_their_first_runs(api, owner_client):
    first = api.create(config={**INIT["config"], "seed": 1})
    second = api.create(config={**INIT["config"], "seed": 2, "learning_rate": 0.001})
    response = owner_client.get(reverse("compare"), {"runs": f"{first},{second}"})
    rows = {row["name"]: row for row in response.context["hyperparameters"]}
    assert rows["learning_rate"]["values"] == [0.00025, 0.001] and rows["learning_rate"]["differs"]
    assert rows["seed"]["values"] == [1, 2] and not rows["total_timesteps"]["differs"]
    assert "eval_interval" not in rows and "device" not in rows  # the trainer's settings are not a script's
    grouped = owner_client.get(reverse("compare-data"), {"runs": f"{first},{second}", "group": "hp:learning_rate"})
    assert grouped.status_code == 200, grouped.content


def test_cancel_on_its_page_ends_a_logged_run_and_its_script_hears_409(api, owner_client):
    run_id = api.create()
    owner_client.post(reverse("run-cancel", args=[run_id]))
    assert Run.objects.get(pk=run_id).status == Run.Status.CANCELLED
    assert api.points(run_id, [point(1, loss=1.0)]).status_code == 409


def test_clone_resume_live_changes_and_checkpoint_jobs_are_refused_for_a_logged_run(api, owner_client):
    run_id = api.create()
    run = Run.objects.get(pk=run_id)
    api.upload(run_id, "checkpoint", 1, b"weights")
    clone = owner_client.get(reverse("experiment-clone", args=[run.experiment_id]))
    assert clone.status_code == 302
    change = owner_client.post(reverse("run-change", args=[run_id]), {"hp_learning_rate": "0.1"},
                               HTTP_ACCEPT="application/json")
    assert change.status_code == 409 and "logged" in change.json()["error"]
    job = owner_client.post(reverse("run-jobs", args=[run_id]), {"checkpoint": Checkpoint.objects.get().pk,
                                                                  "kind": "evaluate", "episodes": "1"},
                            HTTP_ACCEPT="application/json")
    assert job.status_code == 409
    Run.objects.filter(pk=run_id).update(status=Run.Status.LOST)
    owner_client.post(reverse("run-resume", args=[run_id]))
    assert Run.objects.get(pk=run_id).status == Run.Status.LOST  # not queued for a worker


def test_the_reaper_marks_a_logged_run_lost_only_after_its_script_is_silent_for_the_setting(api, settings):
    """What the reaper does with a silent logged run: nothing for LOGGED_RUN_SILENCE_SECONDS (a script may log
    nothing for minutes), then lost with an error in a script's terms, never queued for a worker; the script's
    next points bring it back."""
    settings.LOGGED_RUN_SILENCE_SECONDS = 600
    run_id = api.create()
    Run.objects.filter(pk=run_id).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert lifecycle.reap_lost_runs() == 0
    run = Run.objects.select_related("experiment").get(pk=run_id)
    assert run.status == Run.Status.RUNNING and not run.not_responding
    Run.objects.filter(pk=run_id).update(heartbeat_at=timezone.now() - timedelta(minutes=11))
    assert Run.objects.select_related("experiment").get(pk=run_id).not_responding
    assert lifecycle.reap_lost_runs() == 1
    run.refresh_from_db()
    assert run.status == Run.Status.LOST and "script sent nothing for 10 minutes" in run.error
    assert api.points(run_id, [point(1, loss=1.0)]).json()["stored_through"] == 1
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.error == "" and run.finished_at is None


def test_the_lists_filter_logged_experiments_and_runs_by_their_algorithm(api, owner_client, make_experiment):
    run_id = api.create()
    make_experiment(name="trained")
    experiments = owner_client.get(reverse("experiment-list"), {"algorithm": LOGGED}).content.decode()
    assert INIT["experiment"] in experiments and "trained" not in experiments and "Unknown algorithm" not in experiments
    runs = owner_client.get(reverse("run-list"), {"algorithm": LOGGED}).content.decode()
    assert f'href="/runs/{run_id}/"' in runs


def test_a_script_logs_into_a_project_it_edits_and_the_projects_members_see_the_run(api, owner, stranger,
                                                                                    stranger_api, django_user_model):
    from rlweb.projects.models import Membership, Project

    lab = Project.objects.create(name="lab", owner=stranger)
    Membership.objects.create(project=lab, user=owner, role=Membership.Role.EDITOR)
    viewer = django_user_model.objects.create_user("viewer", password="a long test password 3")
    Membership.objects.create(project=lab, user=viewer, role=Membership.Role.VIEWER)
    private = api.create()
    shared = api.create(project=lab.pk)
    assert Run.objects.get(pk=shared).experiment.project == lab  # an experiment of that name in the project
    assert Run.objects.get(pk=private).experiment.project is None
    assert api.create(project=lab.pk) != shared and Run.objects.get(pk=api.create(project=lab.pk)).experiment.pk == \
        Run.objects.get(pk=shared).experiment.pk  # the next run joins it
    assert stranger_api.get(f"/api/runs/{shared}").status_code == 200  # the project's owner sees it
    assert stranger_api.get(f"/api/runs/{private}").status_code == 404

    refused = Api(viewer).post("/api/logged-runs", {**INIT, "project": lab.pk})
    assert refused.status_code == 403 and "viewer" in refused.json()["detail"]
    outsider = django_user_model.objects.create_user("outsider", password="a long test password 4")
    refused = Api(outsider).post("/api/logged-runs", {**INIT, "project": lab.pk})
    assert refused.status_code == 404 and f"no project {lab.pk}" in refused.json()["detail"]
    assert api.post("/api/logged-runs", {**INIT, "project": "lab"}).status_code == 422  # an id, not a name
