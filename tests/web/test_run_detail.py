"""The run page: status, progress, the chart container, checkpoint links, and plotly from our own static files."""

import re

from django.urls import reverse

from rlweb.experiments.models import Checkpoint


def test_it_shows_status_progress_and_the_chart_of_a_queued_run(owner_client, queued_run):
    response = owner_client.get(reverse("run-detail", args=[queued_run.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r'id="run-status"[^>]*>queued<', html)
    assert f'<progress id="run-progress" max="{queued_run.total_steps}" value="0">' in html
    assert f"0 / {queued_run.total_steps} steps" in html
    assert 'id="chart-episode-return"' in html
    assert 'id="cancel-form"' in html
    assert reverse("run-events", args=[queued_run.pk]) in html and reverse("run-stream", args=[queued_run.pk]) in html


def test_a_finished_run_links_its_checkpoints(owner_client, trained_run):
    html = owner_client.get(reverse("run-detail", args=[trained_run.pk])).content.decode()
    final = Checkpoint.objects.get(run=trained_run, tag="final")
    assert f'<a data-checkpoint-tag="final" href="{final.get_absolute_url()}"' in html
    assert re.search(r'id="run-status"[^>]*>succeeded<', html)
    assert f"{trained_run.total_steps} / {trained_run.total_steps} steps" in html
    assert 'id="cancel-form"' not in html


def test_the_page_loads_plotly_from_our_static_files_only(owner_client, queued_run):
    html = owner_client.get(reverse("run-detail", args=[queued_run.pk])).content.decode()
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', html)
    assert "/static/vendor/plotly/plotly.min.js" in scripts
    assert not [src for src in scripts if "//" in src]  # no CDN: the page works offline
    assert owner_client.get("/static/vendor/plotly/plotly.min.js").status_code == 200


def test_a_stranger_gets_a_404(stranger_client, queued_run):
    assert stranger_client.get(reverse("run-detail", args=[queued_run.pk])).status_code == 404


def test_a_missing_or_huge_id_is_a_404(owner_client):
    assert owner_client.get(reverse("run-detail", args=[9999])).status_code == 404
    assert owner_client.get("/runs/99999999999999999999999/").status_code == 404
