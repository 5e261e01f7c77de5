"""The experiment page lists its runs; other users get a 404."""

from django.urls import reverse


def test_it_lists_the_runs_of_the_experiment(owner_client, queued_run):
    response = owner_client.get(reverse("experiment-detail", args=[queued_run.experiment.pk]))
    assert response.status_code == 200
    assert f'href="{queued_run.get_absolute_url()}"'.encode() in response.content
    assert b"queued" in response.content and b"hidden_layers" in response.content


def test_a_stranger_gets_a_404(stranger_client, queued_run):
    assert stranger_client.get(reverse("experiment-detail", args=[queued_run.experiment.pk])).status_code == 404


def test_a_missing_or_huge_id_is_a_404(owner_client, db):
    assert owner_client.get(reverse("experiment-detail", args=[4242])).status_code == 404
    assert owner_client.get("/experiments/99999999999999999999999/").status_code == 404
