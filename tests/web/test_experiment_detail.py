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


def test_a_cancelled_or_lost_run_can_be_resumed_from_the_experiment_page(owner_client, queued_run):
    from rlweb.experiments.models import Run

    url = reverse("experiment-detail", args=[queued_run.experiment.pk])
    assert b"data-resume-run" not in owner_client.get(url).content
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.CANCELLED)
    html = owner_client.get(url).content.decode()
    assert f'action="{reverse("run-resume", args=[queued_run.pk])}"' in html and "data-resume-run" in html


def test_it_offers_clone_and_delete(owner_client, queued_run):
    html = owner_client.get(reverse("experiment-detail", args=[queued_run.experiment.pk])).content.decode()
    assert f'href="{reverse("experiment-clone", args=[queued_run.experiment.pk])}"' in html
    assert f'action="{reverse("experiment-delete", args=[queued_run.experiment.pk])}"' in html


def test_it_says_whether_lost_runs_resume_by_themselves(owner_client, make_experiment):
    experiment = make_experiment(max_auto_resumes=2)
    page = owner_client.get(experiment.get_absolute_url()).content.decode()
    assert "resumes by itself from its latest checkpoint, up to 2 times." in page
    experiment.auto_resume = False
    experiment.save()
    assert "stays lost until you resume it" in owner_client.get(experiment.get_absolute_url()).content.decode()


def test_the_lists_mark_the_rows_of_active_runs_for_their_script_to_follow(owner_client, queued_run):
    """static/experiments/live_rows.js draws a list's rows again while one holds data-active: a queued or running
    run (an experiment with one, on the experiment list), and stops once none does."""
    from django.utils import timezone

    from rlweb.experiments.models import Run

    pages = [reverse("experiment-list"), reverse("experiment-detail", args=[queued_run.experiment.pk]),
             reverse("run-list")]
    for status, active in ((Run.Status.QUEUED, True), (Run.Status.RUNNING, True), (Run.Status.SUCCEEDED, False),
                           (Run.Status.CANCELLED, False)):
        Run.objects.filter(pk=queued_run.pk).update(status=status, heartbeat_at=timezone.now())  # one not silent
        for url in pages:
            html = owner_client.get(url).content.decode()
            assert "data-live-rows" in html and "experiments/live_rows.js" in html, url
            assert ("data-active" in html) == active, (url, status)
