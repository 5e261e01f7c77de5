"""A TensorBoard log folder imported as a finished logged run (rlweb/logged/tensorboard.py), through the API,
the page and `python -m rlweb_client import-tensorboard`: the event files are written by torch's SummaryWriter and
the stored points equal them exactly (tag, step, value). Archives reaching outside their folder, links, and
archives past the bound (packed or unpacked) are refused, storing nothing."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from torch.utils.tensorboard import SummaryWriter

from rlweb.api.models import ApiToken
from rlweb.experiments.models import Event, Experiment, Run
from tests.web.test_logged_runs import Api

CLIENT = Path(__file__).resolve().parents[2] / "client"
METRIC_KINDS = ("train", "episode", "eval")


def write_log(folder: Path, start: float = 0.0) -> dict[tuple[str, int], float]:
    """Two tags over 50 steps (one of them every 10 steps), as a training script writes them, the returns from
    `start`; returns what the event files hold: {(tag, step): value} (TensorBoard keeps float32)."""
    source = {}
    with SummaryWriter(str(folder)) as writer:
        for step in range(50):
            writer.add_scalar("charts/episodic_return", start + 3.7 * step - 0.01 * step ** 2, step)
            writer.add_scalar("losses/value_loss", 1.0 / (step + 1), step * 10)
            source[("charts/episodic_return", step)] = float(np.float32(start + 3.7 * step - 0.01 * step ** 2))
            source[("losses/value_loss", step * 10)] = float(np.float32(1.0 / (step + 1)))
    return source


def zipped(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in folder.rglob("*"):
            archive.write(path, path.relative_to(folder).as_posix())
    return buffer.getvalue()


def stored(run_id: int) -> dict[tuple[str, int], float]:
    return {(tag, event.step): value for event in Event.objects.filter(run_id=run_id, kind__in=METRIC_KINDS)
            for tag, value in event.values.items()}


def upload(api: Api, content: bytes, name: str = "ppo_1.zip", experiment: str = "tb-import"):
    return api.client.post("/api/logged-runs/import-tensorboard",
                           {"experiment": experiment, "file": SimpleUploadedFile(name, content)},
                           HTTP_AUTHORIZATION=f"Bearer {api.token}")


@pytest.fixture
def api(owner):
    return Api(owner)


def test_a_folder_imported_through_the_api_is_a_finished_run_whose_points_equal_its_source(api, tmp_path):
    source = write_log(tmp_path / "ppo_1")
    answer = upload(api, zipped(tmp_path / "ppo_1"))
    assert answer.status_code == 201, answer.content
    run = Run.objects.select_related("experiment").get(pk=answer.json()["id"])
    assert run.status == Run.Status.SUCCEEDED and run.experiment.is_logged and run.experiment.name == "tb-import"
    assert stored(run.pk) == source
    times = list(Event.objects.filter(run=run, kind__in=METRIC_KINDS).order_by("seq").values_list("time", flat=True))
    assert min(times) == 0.0 and max(times) < 60  # seconds since the first scalar
    assert run.steps_done == 490


def test_a_runs_folder_of_several_runs_makes_one_run_each_named_by_its_folder(api, owner_client, tmp_path):
    sources = {name: write_log(tmp_path / "runs" / name, start) for name, start in (("ppo_1", 0.0), ("ppo_2", 100.0))}
    answer = upload(api, zipped(tmp_path / "runs"), name="runs.zip")
    assert answer.status_code == 201, answer.content
    made = answer.json()["runs"]
    assert [run["name"] for run in made] == ["ppo_1", "ppo_2"] and answer.json()["id"] == made[0]["id"]
    runs = [Run.objects.select_related("experiment", "logged").get(pk=run["id"]) for run in made]
    assert len({run.experiment_id for run in runs}) == 1 and [run.seed for run in runs] == [0, 1]
    for run, name in zip(runs, sources):
        assert stored(run.pk) == sources[name]  # its own tags, not prefixed, and nothing of the other's
        assert run.status == Run.Status.SUCCEEDED and run.logged.command.endswith(f": {name}")
    one = upload(api, zipped(tmp_path / "runs" / "ppo_1"), name="ppo_1.zip", experiment="one")
    assert [run["name"] for run in one.json()["runs"]] == ["ppo_1"]  # the archive's name, without its suffix
    page = owner_client.post(reverse("tensorboard-import"), {
        "experiment": "from the page", "name": "sweep",
        "archive": SimpleUploadedFile("runs.zip", zipped(tmp_path / "runs"))})
    experiment = Experiment.objects.get(name="from the page")
    assert page.status_code == 302 and page["Location"] == experiment.get_absolute_url()
    assert sorted(run.logged.name for run in experiment.runs.all()) == ["sweep/ppo_1", "sweep/ppo_2"]


def test_a_folder_imported_through_the_page_equals_its_source_and_opens_its_run(owner_client, tmp_path):
    source = write_log(tmp_path / "logs")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as bundle:
        bundle.add(tmp_path / "logs", arcname="logs")
    page = owner_client.get(reverse("tensorboard-import"))
    assert page.status_code == 200 and b'enctype="multipart/form-data"' in page.content
    answer = owner_client.post(reverse("tensorboard-import"), {
        "experiment": "from the page", "archive": SimpleUploadedFile("logs.tar.gz", archive.getvalue())})
    run = Run.objects.get(experiment__name="from the page")
    assert answer.status_code == 302 and answer["Location"] == run.get_absolute_url()
    assert stored(run.pk) == source


def test_the_page_needs_a_login_and_a_csrf_token(client, owner_client, tmp_path):
    assert client.get(reverse("tensorboard-import")).status_code == 302  # to the login page
    owner_client.handler.enforce_csrf_checks = True
    write_log(tmp_path / "logs")
    refused = owner_client.post(reverse("tensorboard-import"), {
        "experiment": "x", "archive": SimpleUploadedFile("logs.zip", zipped(tmp_path / "logs"))})
    assert refused.status_code == 403 and not Run.objects.exists()


def test_a_zip_reaching_outside_its_folder_is_refused_and_nothing_is_written(api, tmp_path):
    write_log(tmp_path / "logs")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in (tmp_path / "logs").iterdir():
            archive.write(path, path.name)
        archive.writestr("../evil", b"outside")
    answer = upload(api, buffer.getvalue())
    assert answer.status_code == 400 and "'../evil'" in answer.json()["detail"]
    assert not Run.objects.exists() and not Experiment.objects.exists()


def test_a_tar_holding_a_link_or_an_absolute_path_is_refused(api):
    for member in (tarfile.TarInfo("logs/link"), tarfile.TarInfo("/etc/evil")):
        if member.name.endswith("link"):
            member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            archive.addfile(member, io.BytesIO(b""))
        answer = upload(api, buffer.getvalue(), name="logs.tar.gz")
        assert answer.status_code == 400, answer.content
    assert not Run.objects.exists()


def test_an_archive_past_the_bound_packed_or_unpacked_is_refused_naming_it(api, settings):
    settings.TENSORBOARD_IMPORT_MAX_MB = 1
    large = upload(api, os.urandom(1024 * 1024 + 1))
    assert large.status_code == 413 and "1.0 MB (RLWEB_TENSORBOARD_IMPORT_MAX_MB)" in large.json()["detail"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("events.out.tfevents.1.host", b"\0" * (2 * 1024 * 1024))  # a few KB packed
    unpacked = upload(api, buffer.getvalue())
    assert unpacked.status_code == 413 and "Unpacked, the archive takes 2.0 MB" in unpacked.json()["detail"]
    assert not Run.objects.exists()


def test_an_archive_without_scalars_is_refused(api):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", b"no events here")
    answer = upload(api, buffer.getvalue())
    assert answer.status_code == 400 and "no TensorBoard scalars" in answer.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_the_client_command_zips_a_folder_and_imports_it(live_server, owner, tmp_path):
    source = write_log(tmp_path / "runs" / "ppo_1")
    _, token = ApiToken.issue(owner, "import")
    done = subprocess.run([sys.executable, "-m", "rlweb_client", "import-tensorboard", str(tmp_path / "runs"),
                           "--experiment", "from the client"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_URL": live_server.url,
                               "RLWEB_TOKEN": token})
    assert done.returncode == 0, done.stdout + done.stderr
    run = Run.objects.get(experiment__name="from the client")
    assert f"imported as run {run.pk}" in done.stdout
    assert stored(run.pk) == source
    second = write_log(tmp_path / "runs" / "ppo_2", start=100.0)
    done = subprocess.run([sys.executable, "-m", "rlweb_client", "import-tensorboard", str(tmp_path / "runs"),
                           "--experiment", "both"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(CLIENT), "RLWEB_URL": live_server.url,
                               "RLWEB_TOKEN": token})
    assert done.returncode == 0, done.stdout + done.stderr
    runs = list(Run.objects.filter(experiment__name="both").order_by("pk"))
    assert "imported 2 runs, one per folder of event files:" in done.stdout
    assert f"ppo_2: run {runs[1].pk}: " in done.stdout
    assert [stored(run.pk) for run in runs] == [source, second]
