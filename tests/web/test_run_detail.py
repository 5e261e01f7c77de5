"""The run page: status, progress, the chart container, checkpoint links, and plotly from our own static files."""

import re

from django.urls import reverse

from rlweb.experiments.models import Checkpoint, Run


def test_it_shows_status_progress_and_the_chart_of_a_queued_run(owner_client, queued_run):
    response = owner_client.get(reverse("run-detail", args=[queued_run.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r'id="run-status"[^>]*>queued<', html)
    assert f'<progress id="run-progress" max="{queued_run.total_steps}" value="0">' in html
    assert f"0 / {queued_run.total_steps} steps" in html
    assert 'id="charts"' in html
    assert 'id="cancel-form"' in html
    assert reverse("run-history", args=[queued_run.pk]) in html and reverse("run-stream", args=[queued_run.pk]) in html


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
    plotly = [src for src in scripts if src.startswith("/static/vendor/plotly/plotly-cartesian-")]
    assert len(plotly) == 1
    assert not [src for src in scripts if "//" in src]  # no CDN: the page works offline
    assert owner_client.get(plotly[0]).status_code == 200


def test_a_stranger_gets_a_404(stranger_client, queued_run):
    assert stranger_client.get(reverse("run-detail", args=[queued_run.pk])).status_code == 404


def test_a_missing_or_huge_id_is_a_404(owner_client):
    assert owner_client.get(reverse("run-detail", args=[9999])).status_code == 404
    assert owner_client.get("/runs/99999999999999999999999/").status_code == 404


def test_it_shows_the_configuration_device_host_and_timings(owner_client, trained_run):
    html = owner_client.get(reverse("run-detail", args=[trained_run.pk])).content.decode()
    config = html[html.index('id="run-config"'):html.index('id="run-timings"')]
    experiment = trained_run.experiment
    for label, value in [("Algorithm", "dqn"), ("Seed", "0"), ("Total steps", str(trained_run.total_steps)),
                         ("Eval interval", "200 steps, 2 episodes"), ("Checkpoint interval", "off"),
                         ("Video interval", "off"), ("Device asked for", "cpu"),
                         ("Worker host", trained_run.worker_host)]:
        assert re.search(rf"<dt>{label}</dt><dd>{re.escape(value)}</dd>", config), label
    assert '<dt>Device used</dt><dd id="device-used">cpu</dd>' in config
    assert "<code>CartPole-v1</code>" in config
    for name, value in experiment.hyperparameters.items():
        assert f"<dt><code>{name}</code></dt><dd>{value}</dd>" in config
    timings = html[html.index('id="run-timings"'):]
    assert re.search(r'<dt>Finished</dt><dd id="run-finished">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</dd>', timings)
    seconds = (trained_run.finished_at - trained_run.started_at).total_seconds()
    assert f'<dt>Duration</dt><dd id="run-duration">{seconds:.1f} s</dd>' in timings  # a run of seconds  # "0 minutes" for a run of seconds


def test_a_failed_run_shows_its_error_and_traceback(owner_client, queued_run):
    Run.objects.filter(pk=queued_run.pk).update(status="failed", error="ValueError: the env exploded",
                                                traceback='Traceback (most recent call last):\n  File "x.py"')
    html = owner_client.get(reverse("run-detail", args=[queued_run.pk])).content.decode()
    assert '<span id="run-error-text">ValueError: the env exploded</span>' in html
    assert "<summary>Traceback</summary><pre>Traceback (most recent call last):\n  File &quot;x.py&quot;</pre>" in html


def test_it_has_the_chart_controls_the_log_and_the_csv_link(owner_client, queued_run):
    html = owner_client.get(reverse("run-detail", args=[queued_run.pk])).content.decode()
    for element in ('id="smoothing"', 'id="x-axis"', 'id="log-y"', 'id="charts"', 'id="log-list"',
                    'id="video-list"', f'href="{reverse("run-csv", args=[queued_run.pk])}"',
                    f'data-history-url="{reverse("run-history", args=[queued_run.pk])}"'):
        assert element in html, element


def test_durations_read_in_minutes_and_hours_and_a_running_run_says_so(owner_client, queued_run):
    from datetime import timedelta

    from django.utils import timezone

    started = timezone.now() - timedelta(hours=3)
    url = reverse("run-detail", args=[queued_run.pk])
    for finished, text in [(started + timedelta(minutes=3, seconds=20), "3 min 20 s"),
                           (started + timedelta(hours=2, minutes=5), "2 h 5 min"), (None, "running for 3 h 0 min")]:
        queued_run.__class__.objects.filter(pk=queued_run.pk).update(started_at=started, finished_at=finished)
        assert f'<dd id="run-duration">{text}</dd>' in owner_client.get(url).content.decode()


def test_a_finished_run_shows_its_average_steps_per_second_and_a_running_one_waits_for_its_live_rate(owner_client,
                                                                                                   queued_run):
    """A short run ends before its first `time` event (every few seconds): the page showed "–". A finished run
    shows its steps over its training seconds, over every attempt; a running one the rate its worker reports."""
    from datetime import timedelta

    from django.utils import timezone

    started = timezone.now() - timedelta(hours=1)
    url = reverse("run-detail", args=[queued_run.pk])
    Run.objects.filter(pk=queued_run.pk).update(status="succeeded", started_at=started, steps_done=30_000,
                                                 finished_at=started + timedelta(seconds=20),
                                                 earlier_attempts_seconds=4.0)
    html = owner_client.get(url).content.decode()
    assert '<dd id="steps-per-second" title="the average over the run">1250</dd>' in html  # 30,000 / 24 s
    Run.objects.filter(pk=queued_run.pk).update(status="running", finished_at=None)
    assert '<dd id="steps-per-second">–</dd>' in owner_client.get(url).content.decode()


def test_a_running_runs_page_carries_the_seconds_its_duration_clock_counts_on_from(owner_client, queued_run):
    """The page's script (lib/duration.js, tested by node) counts "running for ..." on from these seconds."""
    from datetime import timedelta

    from django.utils import timezone

    url = reverse("run-detail", args=[queued_run.pk])
    assert "data-running-seconds" not in owner_client.get(url).content.decode()  # queued: nothing to count yet
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING, attempts=1, heartbeat_at=timezone.now(),
                                                started_at=timezone.now() - timedelta(seconds=90))
    seconds = float(re.search(r'data-running-seconds="([0-9.]+)"', owner_client.get(url).content.decode())[1])
    assert 90 <= seconds < 120
