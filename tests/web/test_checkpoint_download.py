"""Downloading checkpoints: a zip of config.json and model.safetensors that trainer.load restores,
for the owner only."""

import io
import zipfile

import trainer
from django.urls import reverse

from rlweb.experiments.models import Checkpoint


def test_the_owner_downloads_the_final_checkpoint_and_trainer_loads_it(owner_client, trained_run, tmp_path):
    checkpoint = Checkpoint.objects.get(run=trained_run, tag="final")
    response = owner_client.get(reverse("checkpoint-download", args=[checkpoint.pk]))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"] == f'attachment; filename="run{trained_run.pk}-final.zip"'
    content = b"".join(response.streaming_content)
    assert set(zipfile.ZipFile(io.BytesIO(content)).namelist()) == {"config.json", "model.safetensors"}
    path = tmp_path / "final.zip"
    path.write_bytes(content)
    agent = trainer.load(path)
    assert agent.env_id == "CartPole-v1" and agent.steps_done == trained_run.total_steps
    assert agent.evaluate(episodes=1)["mean"] > 0


def test_a_stranger_gets_a_404(stranger_client, trained_run):
    checkpoint = Checkpoint.objects.filter(run=trained_run).first()
    assert stranger_client.get(reverse("checkpoint-download", args=[checkpoint.pk])).status_code == 404


def test_a_missing_checkpoint_or_file_is_a_404(owner_client, trained_run):
    assert owner_client.get(reverse("checkpoint-download", args=[424242])).status_code == 404
    assert owner_client.get("/checkpoints/99999999999999999999999/download/").status_code == 404
    checkpoint = Checkpoint.objects.get(run=trained_run, tag="final")
    checkpoint.file.storage.delete(checkpoint.file.name)
    assert owner_client.get(reverse("checkpoint-download", args=[checkpoint.pk])).status_code == 404
