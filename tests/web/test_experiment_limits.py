"""Per-user limits an admin sets: queued plus running runs per user, and environment steps per run. Both
are refused next to their field before anything is queued."""

import pytest
from django.urls import reverse

from rlweb.experiments.models import Experiment, Run
from tests.web.helpers import form_data


def launched(response) -> bool:
    return response.status_code == 302


def test_steps_per_run_above_the_setting_are_refused_next_to_the_field(owner_client, settings):
    settings.MAX_TOTAL_STEPS = 10_000
    response = owner_client.post(reverse("experiment-new"), form_data(total_steps="10001"))
    assert response.status_code == 200
    assert response.context["form"].errors["total_steps"] == ["At most 10,000 environment steps per run on this site."]
    assert 'max="10000"' in response.content.decode()
    assert not Experiment.objects.exists() and not Run.objects.exists()
    assert launched(owner_client.post(reverse("experiment-new"), form_data(total_steps="10000")))


@pytest.mark.parametrize("steps", [str(10**9 + 1), str(10**10), "9" * 40])
def test_the_default_cap_is_a_billion_steps(owner_client, steps):
    response = owner_client.post(reverse("experiment-new"), form_data(total_steps=steps))
    assert "total_steps" in response.context["form"].errors
    assert not Run.objects.exists()


def test_seeds_beyond_the_users_active_runs_limit_are_refused(owner_client, settings, make_experiment):
    settings.MAX_ACTIVE_RUNS_PER_USER = 4
    old = make_experiment(num_seeds=3)
    for seed, status in enumerate(["queued", "running", "queued", "succeeded", "failed", "cancelled"]):
        Run.objects.create(experiment=old, seed=seed, total_steps=400, status=status)

    response = owner_client.post(reverse("experiment-new"), form_data(num_seeds="2"))
    assert response.status_code == 200
    assert response.context["form"].errors["num_seeds"] == [
        "You have 3 of the 4 queued or running runs this site allows a user at a time, so 1 more seed can start "
        "now. Wait for some to finish, or cancel them."]
    assert Run.objects.count() == 6 and Experiment.objects.count() == 1  # nothing queued

    assert launched(owner_client.post(reverse("experiment-new"), form_data(num_seeds="1")))
    full = owner_client.post(reverse("experiment-new"), form_data(num_seeds="1"))
    assert "so no more seeds can start now" in full.context["form"].errors["num_seeds"][0]
    assert Run.objects.filter(status__in=Run.ACTIVE).count() == 4


def test_other_users_runs_do_not_count(owner_client, stranger, settings, make_experiment):
    settings.MAX_ACTIVE_RUNS_PER_USER = 2
    theirs = make_experiment(owner=stranger, num_seeds=5)
    for seed in range(5):
        Run.objects.create(experiment=theirs, seed=seed, total_steps=400)
    assert launched(owner_client.post(reverse("experiment-new"), form_data(num_seeds="2")))
