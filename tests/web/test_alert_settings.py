"""The alerts pages (rlweb/alerts/views.py): a user's default and an experiment's override, saved with errors by
field; a webhook on a private, loopback or link-local address (or a name resolving to one) is refused, saying why,
unless RLWEB_WEBHOOK_ALLOW_PRIVATE allows it; strangers get 404; a project's viewer may have their own alerts for a
shared experiment; an override replaces the default for its experiment."""

from __future__ import annotations

import pytest

from rlweb.alerts import targets
from rlweb.alerts.models import Alert, AlertRule
from rlweb.alerts.triggers import alert_run_ended, rules_for
from rlweb.experiments.models import Experiment
from rlweb.projects.models import Membership, Project
from tests.web.helpers import PASSWORD

SETTINGS_URL = "/account/alerts/"


def experiment_url(experiment) -> str:
    return f"/experiments/{experiment.pk}/alerts/"


def errors(response) -> dict:
    assert response.status_code == 200, response.status_code
    return {field: [str(error) for error in found] for field, found in response.context["form"].errors.items()}


def test_the_pages_show_the_forms_and_write_nothing_on_get(owner_client, make_experiment):
    experiment = make_experiment()
    page = owner_client.get(SETTINGS_URL)
    assert page.status_code == 200 and b'id="alert-form"' in page.content and b'id="delivery-log"' in page.content
    assert b'href="/account/alerts/"' in page.content  # the nav's link
    assert owner_client.get(experiment_url(experiment)).status_code == 200
    assert b'id="alerts-link"' in owner_client.get(experiment.get_absolute_url()).content
    assert not AlertRule.objects.exists()


def test_the_default_is_saved_and_bad_values_are_refused_by_field(owner, owner_client):
    response = owner_client.post(SETTINGS_URL, {"on_end": ["succeeded", "exploded"], "threshold_metric": "eval/ret urn",
                                                "threshold_value": "inf", "email": "not-an-address"})
    assert errors(response) == {
        "on_end": ["Select a valid choice. exploded is not one of the available choices."],
        "threshold_metric": ["A metric name such as eval/return_mean: letters, digits, _ . - and /."],
        "threshold_value": ["Enter a number."], "email": ["Enter a valid email address."]}
    assert errors(owner_client.post(SETTINGS_URL, {"threshold_metric": "eval/return_mean", "on_nan": "on"})) == {
        "threshold_value": ["Give the threshold the metric passes."],
        "email": ["Say where to be told: an email address, a webhook URL, or both."]}
    assert not AlertRule.objects.exists()

    response = owner_client.post(SETTINGS_URL, {"on_end": ["failed", "lost"], "threshold_metric": "eval/return_mean",
                                                "threshold_value": "475", "email": "me@example.org"})
    assert response.status_code == 302 and response["Location"] == SETTINGS_URL
    rule = AlertRule.objects.get(owner=owner)
    assert (rule.experiment, rule.on_end, rule.threshold_direction, rule.threshold_value) == (
        None, ["failed", "lost"], "above", 475.0)
    secret = rule.webhook_secret
    assert owner_client.post(SETTINGS_URL, {"action": "new-secret"}).status_code == 302
    rule.refresh_from_db()
    assert len(rule.webhook_secret) == 64 and rule.webhook_secret != secret


@pytest.mark.parametrize("url, why", [
    ("http://127.0.0.1:8000/hook", "127.0.0.1 is a loopback address"),
    ("https://10.1.2.3/hook", "10.1.2.3 is a private address"),
    ("http://169.254.169.254/latest/meta-data", "169.254.169.254 is a link-local address"),
    ("http://localhost:9000/hook", "localhost resolves to"),  # a name that resolves to loopback
    ("http://[::ffff:127.0.0.1]/hook", "127.0.0.1 is a loopback address"),
    ("ftp://example.org/hook", "Only http:// and https:// webhooks are sent."),
    ("http://user:pw@example.org/hook", "Put no user name or password in the URL"),
])
def test_a_webhook_to_the_servers_own_network_is_refused_with_why(owner_client, url, why):
    found = errors(owner_client.post(SETTINGS_URL, {"on_end": ["failed"], "webhook_url": url}))
    assert list(found) == ["webhook_url"] and why in found["webhook_url"][0], found
    assert not AlertRule.objects.exists()


def test_the_admin_may_allow_private_webhook_targets(owner_client, settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    response = owner_client.post(SETTINGS_URL, {"on_end": ["failed"], "webhook_url": "http://10.1.2.3:8080/hook"})
    assert response.status_code == 302
    assert AlertRule.objects.get().webhook_url == "http://10.1.2.3:8080/hook"


def test_public_addresses_pass_the_check():
    assert targets.why_not_public("93.184.215.14") == ""
    assert targets.why_not_public("2606:4700::1111") == ""
    assert targets.why_not_public("100.64.0.1")  # shared address space (carrier NAT): not public either
    assert targets.why_not_public("0.0.0.0") and targets.why_not_public("fe80::1%eth0")


def test_strangers_get_404_for_an_experiments_alerts(stranger_client, make_experiment):
    experiment = make_experiment()
    assert stranger_client.get(experiment_url(experiment)).status_code == 404
    assert stranger_client.post(experiment_url(experiment), {"on_end": ["failed"],
                                                             "email": "s@example.org"}).status_code == 404
    assert not AlertRule.objects.exists()


def test_an_override_replaces_the_default_and_is_reset_to_it(owner, owner_client, trained_run):
    experiment = trained_run.experiment
    default = AlertRule.objects.create(owner=owner, on_end=["succeeded"], email="me@example.org")
    page = owner_client.get(experiment_url(experiment))
    assert b"default alerts</a> apply here" in page.content
    assert page.context["form"]["on_end"].value() == ["succeeded"]  # a new override starts from the default
    response = owner_client.post(experiment_url(experiment), {"on_nan": "on", "email": "me@example.org"})
    assert response.status_code == 302
    override = AlertRule.objects.get(experiment=experiment)
    assert rules_for(experiment) == [override]
    alert_run_ended(None, run_id=trained_run.pk, status="succeeded")  # the override asks for no end alerts
    assert not Alert.objects.exists()

    assert owner_client.post(experiment_url(experiment), {"action": "use-default"}).status_code == 302
    assert rules_for(experiment) == [default]
    alert_run_ended(None, run_id=trained_run.pk, status="succeeded")
    assert Alert.objects.get().rule == default


def test_a_projects_viewer_may_have_alerts_for_a_shared_experiment(owner, make_experiment, django_user_model, client):
    experiment = make_experiment()
    viewer = django_user_model.objects.create_user("viewer", password=PASSWORD)
    project = Project.objects.create(owner=owner, name="shared")
    Membership.objects.create(project=project, user=viewer, role="viewer")
    client.force_login(viewer)
    assert client.post(experiment_url(experiment), {"on_end": ["failed"], "email": "v@example.org"}).status_code == 404
    experiment.project = project
    experiment.save(update_fields=["project"])
    assert client.post(experiment_url(experiment), {"on_end": ["failed"], "email": "v@example.org"}).status_code == 302
    assert [rule.owner for rule in rules_for(experiment)] == [viewer]
    Experiment.objects.filter(pk=experiment.pk).update(name="secret-plan")
    assert b"secret-plan" in client.get(SETTINGS_URL).content  # listed among the viewer's own alerts
    Membership.objects.filter(user=viewer).delete()  # out of the project: told nothing more, shown nothing more
    assert rules_for(experiment) == []
    assert b"secret-plan" not in client.get(SETTINGS_URL).content


def test_the_metric_field_suggests_what_the_experiments_runs_reported(owner_client, make_experiment):
    from rlweb.experiments.models import Run
    from tests.web.test_compare import add_events

    experiment = make_experiment()
    fresh = owner_client.get(experiment_url(experiment)).content.decode()
    assert 'list="metric-names"' in fresh and '<option value="eval/return_mean">' in fresh  # none reported yet
    run = Run.objects.create(experiment=experiment, seed=0, total_steps=100)
    add_events(run, "train", [(10, {"charts/episodic_return": 9.0, "losses/value_loss": 0.5})])
    reported = owner_client.get(experiment_url(experiment)).content.decode()
    names = reported[reported.index('<datalist id="metric-names">'):reported.index("</datalist>")]
    assert names == ('<datalist id="metric-names"><option value="charts/episodic_return">'
                     '<option value="losses/value_loss">')
