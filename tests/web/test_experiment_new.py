"""The new-experiment form: built from the algorithm's schema, and bad values refused next to their field
before anything is queued."""

import re

import pytest
import trainer
from django.urls import reverse
from django.utils.html import escape

from rlweb.experiments.models import Experiment, Run
from tests.web.helpers import form_data, register_idle_workers


def field_block(html: str, name: str) -> str:
    """The `.field` block of the form that holds the input called `name`."""
    for block in re.split(r'(?=<div class="field)', html):
        if f'name="{name}"' in block:
            return block
    raise AssertionError(f"no field {name} on the page")


def test_it_shows_one_field_per_hyperparameter_with_its_default_help_and_bounds(owner_client):
    response = owner_client.get(reverse("experiment-new"))
    assert response.status_code == 200
    html = response.content.decode()
    for param in trainer.get_spec("dqn").params():
        block = field_block(html, f"hp_{param.name}")
        assert f'value="{param.default}"' in block or param.type is bool
        assert escape(param.help.split(".")[0]) in block
    assert "&gt; 0" in field_block(html, "hp_learning_rate")  # learning_rate > 0
    assert 'list="env-ids"' in field_block(html, "env_id")
    assert '<option value="CartPole-v1">' in html


def test_the_fields_follow_the_algorithm_in_the_query(owner_client):
    response = owner_client.get(reverse("experiment-new"), {"algorithm": "dqn"})
    assert response.context["form"].algorithm_name == "dqn"
    unknown = owner_client.get(reverse("experiment-new"), {"algorithm": "no-such-thing"})
    assert unknown.status_code == 200 and unknown.context["form"].algorithm_name == "dqn"


@pytest.mark.parametrize("algorithm", trainer.algorithm_names())
def test_every_registered_algorithm_gets_its_own_fields(owner_client, algorithm):
    response = owner_client.get(reverse("experiment-new"), {"algorithm": algorithm})
    assert response.status_code == 200 and response.context["form"].algorithm_name == algorithm
    html = response.content.decode()
    for param in trainer.get_spec(algorithm).params():
        field_block(html, f"hp_{param.name}")


def test_values_typed_before_a_change_of_algorithm_are_kept(owner_client):
    response = owner_client.get(reverse("experiment-new"), {"algorithm": "dqn", "name": "Kept", "total_steps": "777"})
    html = response.content.decode()
    assert 'value="Kept"' in field_block(html, "name") and 'value="777"' in field_block(html, "total_steps")


def test_a_valid_form_creates_the_experiment_and_one_queued_run_per_seed(owner, owner_client, live_redis,
                                                                          django_capture_on_commit_callbacks):
    register_idle_workers("cpu", "cpu", "cpu")
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(reverse("experiment-new"), form_data(num_seeds="3", hp_learning_rate="5e-4"))
    experiment = Experiment.objects.get()
    assert response.status_code == 302 and response["Location"] == experiment.get_absolute_url()
    assert experiment.owner == owner
    assert experiment.hyperparameters["learning_rate"] == 0.0005  # parsed values, not strings
    assert experiment.hyperparameters["hidden_layers"] == "32,32"
    runs = list(experiment.runs.all())
    assert [run.seed for run in runs] == [0, 1, 2]
    assert all(run.status == Run.Status.QUEUED and run.task_id for run in runs)
    assert live_redis.llen("cpu") == 3


@pytest.mark.parametrize("device, queue", [("cpu", "cpu"), ("cuda", "gpu"), ("auto", "cpu")])
def test_runs_go_to_the_queue_of_their_device(owner_client, live_redis, django_capture_on_commit_callbacks,
                                              device, queue):
    register_idle_workers("cpu", "gpu")
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post(reverse("experiment-new"), form_data(device=device))
    assert live_redis.llen(queue) == 1


def test_auto_runs_go_to_the_configured_queue(owner_client, live_redis, settings, django_capture_on_commit_callbacks):
    settings.AUTO_QUEUE = "gpu"
    register_idle_workers("cpu", "gpu")
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post(reverse("experiment-new"), form_data(device="auto"))
    assert live_redis.llen("gpu") == 1 and live_redis.llen("cpu") == 0


def test_an_empty_hyperparameter_takes_its_default(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post(reverse("experiment-new"), form_data(hp_gamma=""))
    defaults = {param.name: param.default for param in trainer.get_spec("dqn").params()}
    assert Experiment.objects.get().hyperparameters["gamma"] == defaults["gamma"]


BAD_INPUTS = [
    pytest.param({"env_id": "NoSuchEnv-v0"}, "env_id", "Unknown environment id", id="unknown env id"),
    pytest.param({"env_id": "CartPol-v1"}, "env_id", "Did you mean CartPole-v1", id="misspelt env id"),
    pytest.param({"env_id": "Pendulum-v1"}, "env_id", "needs Discrete actions", id="continuous actions for dqn"),
    pytest.param({"hp_learning_rate": "0"}, "hp_learning_rate", "must be greater than 0", id="zero learning rate"),
    pytest.param({"hp_learning_rate": "-0.001"}, "hp_learning_rate", "must be greater than 0",
                 id="negative learning rate"),
    pytest.param({"hp_batch_size": "2000", "hp_buffer_size": "1000"}, "hp_batch_size",
                 "must not exceed the buffer size", id="batch size above buffer size"),
    pytest.param({"hp_learning_rate": "fast"}, "hp_learning_rate", "must be a number", id="not a number"),
    pytest.param({"hp_batch_size": "1.5"}, "hp_batch_size", "must be a whole number", id="not a whole number"),
    pytest.param({"total_steps": "many"}, "total_steps", "Enter a whole number", id="steps not a number"),
    pytest.param({"total_steps": "0"}, "total_steps", "greater than or equal to 1", id="zero steps"),
    pytest.param({"num_seeds": "0"}, "num_seeds", "greater than or equal to 1", id="zero seeds"),
    pytest.param({"algorithm": "ppo-from-the-future"}, "algorithm", "Select a valid choice", id="unknown algorithm"),
    pytest.param({"name": ""}, "name", "This field is required", id="no name"),
    pytest.param({"total_steps": "50000", "checkpoint_interval": "1"}, "checkpoint_interval",
                 "Must be 0 (off) or at least 50: every 1 of 50,000 steps makes 50,000 checkpoints, and a run makes "
                 "at most 1,000", id="a checkpoint every step"),
    pytest.param({"total_steps": "50000", "video_interval": "100"}, "video_interval",
                 "Must be 0 (off) or at least 250", id="a video every 100 steps"),
]


@pytest.mark.parametrize("overrides, field, message", BAD_INPUTS)
def test_it_refuses_bad_input_next_to_the_field_and_queues_nothing(owner_client, live_redis, overrides, field,
                                                                   message, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = owner_client.post(reverse("experiment-new"), form_data(**overrides))
    assert response.status_code == 200
    assert any(message in error for error in response.context["form"].errors[field])
    block = field_block(response.content.decode(), field)
    assert f'id="id_{field}_error"' in block and message in block
    assert not Experiment.objects.exists() and not Run.objects.exists()
    assert not callbacks and live_redis.llen("cpu") == 0 and live_redis.llen("gpu") == 0


def test_it_reports_every_bad_field_at_once(owner_client):
    response = owner_client.post(reverse("experiment-new"),
                                 form_data(env_id="Pendulum-v1", hp_learning_rate="0", hp_gamma="x"))
    assert {"env_id", "hp_learning_rate", "hp_gamma"} <= set(response.context["form"].errors)


def test_the_algorithms_are_grouped_by_family_with_the_chosen_ones_description_under_the_list(owner_client):
    html = owner_client.get(reverse("experiment-new"), {"algorithm": "sac"}).content.decode()
    select = html[html.index('<select name="algorithm"'):html.index("</select>", html.index('<select name="algorithm"'))]
    groups = re.findall(r'<optgroup label="([^"]+)">', select)
    assert groups == [family for family, _ in trainer.algorithms_by_family()]
    assert groups[:3] == ["DQN family", "Policy gradient", "Continuous control"]
    continuous = select[select.index('label="Continuous control"'):select.index("</optgroup>", select.index(
        'label="Continuous control"'))]
    assert '<option value="sac" selected>' in continuous and 'value="td3"' in continuous
    description = trainer.get_spec("sac").description
    assert escape(description) in field_block(html, "algorithm")


UNSUPPORTED_PAIRS = [
    pytest.param("sac", "CartPole-v1", "sac needs Box actions, but this environment has Discrete actions.",
                 id="sac on discrete CartPole"),
    pytest.param("dqn", "Pendulum-v1", "dqn needs Discrete actions, but this environment has Box actions.",
                 id="dqn on continuous Pendulum"),
]


@pytest.mark.parametrize("algorithm, env_id, message", UNSUPPORTED_PAIRS)
def test_an_algorithm_and_environment_that_do_not_fit_are_refused_next_to_the_environment(
        owner_client, live_redis, algorithm, env_id, message):
    data = form_data(algorithm=algorithm, env_id=env_id)
    data = {name: value for name, value in data.items() if not name.startswith("hp_")}  # that algorithm's defaults
    response = owner_client.post(reverse("experiment-new"), data)
    assert response.status_code == 200
    assert response.context["form"].errors["env_id"] == [message]
    assert message in field_block(response.content.decode(), "env_id")
    assert not Experiment.objects.exists() and live_redis.llen("cpu") == 0


@pytest.mark.parametrize("text, tags", [
    ("", []),
    ("baseline", ["baseline"]),
    (" baseline , lr sweep,,v2.1 ", ["baseline", "lr sweep", "v2.1"]),
    ("CartPole, cartpole, CARTPOLE", ["CartPole"]),  # repeats in any case are dropped
    ("a, b, c, d, e, f, g, h", ["a", "b", "c", "d", "e", "f", "g", "h"]),
])
def test_tags_are_typed_comma_separated_and_stored_as_a_list(owner_client, django_capture_on_commit_callbacks,
                                                            text, tags):
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(reverse("experiment-new"), form_data(tags=text))
    assert response.status_code == 302
    assert Experiment.objects.get().tags == tags


@pytest.mark.parametrize("text, message", [
    ("a, b, c, d, e, f, g, h, i", "At most 8 tags; this has 9."),
    ("x" * 33, "is not a tag"),
    ("fine, <script>", "“<script>” is not a tag"),
    ('quote"d', "is not a tag"),
    ("café", "is not a tag"),
])
def test_bad_tags_are_refused_next_to_the_field(owner_client, text, message):
    response = owner_client.post(reverse("experiment-new"), form_data(tags=text))
    assert response.status_code == 200
    assert message in field_block(response.content.decode(), "tags").replace("&lt;", "<").replace("&gt;", ">")
    assert not Experiment.objects.exists()


def test_the_periodic_checkpoints_kept_are_stored_and_shown_with_twenty_when_left_empty(
        owner_client, django_capture_on_commit_callbacks):
    form = owner_client.get(reverse("experiment-new")).content.decode()
    assert "Periodic checkpoints kept" in field_block(form, "keep_checkpoints")
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post(reverse("experiment-new"), form_data(name="five", keep_checkpoints="5"))
        owner_client.post(reverse("experiment-new"), form_data(name="empty", keep_checkpoints=""))
    assert Experiment.objects.get(name="five").keep_checkpoints == 5
    assert Experiment.objects.get(name="empty").keep_checkpoints == 20
    page = owner_client.get(Experiment.objects.get(name="five").get_absolute_url()).content.decode()
    assert "<dt>keep_checkpoints</dt><dd><code>5</code>" in page


def test_description_video_interval_and_device_are_stored(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post(reverse("experiment-new"), form_data(description="Does a smaller net learn faster?",
                                                               video_interval="200", device="auto"))
    experiment = Experiment.objects.get()
    assert experiment.description == "Does a smaller net learn faster?"
    assert (experiment.video_interval, experiment.device) == (200, "auto")


def test_the_environment_list_offers_atari_ids_as_well_as_gymnasium_ones(owner_client):
    from trainer.envs import known_env_ids

    html = owner_client.get(reverse("experiment-new")).content.decode()
    atari = [env_id for env_id in known_env_ids() if env_id.startswith("ALE/")]
    if not atari:
        pytest.skip("ale-py is not installed here")
    assert f'<option value="{atari[0]}">' in html and '<option value="Pendulum-v1">' in html


def test_the_same_form_posted_twice_makes_one_experiment_and_a_new_form_another(owner_client, live_redis):
    page = owner_client.get(reverse("experiment-new")).content.decode()
    token = re.search(r'name="submission_token" value="([0-9a-f]{32})"', page).group(1)
    first = owner_client.post(reverse("experiment-new"), form_data(submission_token=token))
    again = owner_client.post(reverse("experiment-new"), form_data(submission_token=token))  # a double click
    experiment = Experiment.objects.get()
    assert first["Location"] == again["Location"] == experiment.get_absolute_url()
    assert experiment.runs.count() == 1
    assert token not in owner_client.get(reverse("experiment-new")).content.decode()  # each form its own
    owner_client.post(reverse("experiment-new"), form_data(submission_token="another"))
    assert Experiment.objects.count() == 2


def test_lost_runs_resume_by_themselves_unless_the_form_says_otherwise(owner_client):
    owner_client.post(reverse("experiment-new"), form_data(submission_token="a"))
    data = form_data(submission_token="b", max_auto_resumes="0")
    del data["auto_resume"]  # the box unticked
    owner_client.post(reverse("experiment-new"), data)
    assert list(Experiment.objects.order_by("pk").values_list("auto_resume", "max_auto_resumes")) == [
        (True, 3), (False, 0)]


@pytest.mark.parametrize("query, name", [({}, "CartPole DQN"), ({"algorithm": "ppo"}, "CartPole PPO"),
                                         ({"algorithm": "sac", "env_id": "Pendulum-v1"}, "Pendulum SAC"),
                                         ({"algorithm": "dqn", "env_id": "ALE/Pong-v5"}, "Pong DQN")])
def test_the_default_name_follows_the_algorithm_and_the_environment(owner_client, query, name):
    block = field_block(owner_client.get(reverse("experiment-new"), query).content.decode(), "name")
    assert f'value="{name}"' in block and f'data-default-name="{name}"' in block  # the page's script renames it
    answer = owner_client.get(reverse("experiment-preset"), {"algorithm": "ppo", "env_id": "Acrobot-v1"}).json()
    assert answer["default_name"] == "Acrobot PPO"  # what the page's script shows when the environment changes


def test_a_name_the_user_typed_is_not_the_default_one(owner_client):
    block = field_block(owner_client.get(reverse("experiment-new"), {"algorithm": "ppo", "name": "Mine"})
                        .content.decode(), "name")
    assert 'value="Mine"' in block and 'data-default-name="CartPole PPO"' in block
