"""The new-experiment form and hostile or unmakeable environment ids, and configurations too big for a worker:
a message next to the field, never a 500, nothing queued, no module imported."""

import sys

import pytest
from django.urls import reverse

from rlweb.experiments.models import Experiment
from tests.web.helpers import form_data
from tests.web.test_experiment_new import field_block

# registered ids that answered 500 before (issue 13), and ids that name a module to import
FORMERLY_FAILING = ["Ant-v2", "Hopper-v3", "Walker2d-v2", "GymV21Environment-v0", "phys2d/CartPole-v1",
                    "tabular/CliffWalking-v0", "Pusher-v4"]
MODULE_IDS = ["this:CartPole-v1", "trainer.__main__:CartPole-v1", "pwnmod:CartPole-v1"]


def post(client, live_redis, **overrides):
    response = client.post(reverse("experiment-new"), form_data(**overrides))
    assert response.status_code == 200
    assert not Experiment.objects.exists() and live_redis.llen("cpu") == 0
    return response


@pytest.mark.parametrize("env_id", FORMERLY_FAILING)
def test_a_registered_id_that_cannot_be_made_here_gets_a_message_next_to_the_field(owner_client, live_redis, env_id):
    response = post(owner_client, live_redis, env_id=env_id)
    (message,) = response.context["form"].errors["env_id"]
    assert message.startswith(f"'{env_id}'")
    assert 'id="id_env_id_error"' in field_block(response.content.decode(), "env_id")


@pytest.mark.parametrize("env_id", MODULE_IDS)
def test_an_id_that_names_a_module_is_refused_and_nothing_is_imported(owner_client, live_redis, tmp_path,
                                                                       monkeypatch, env_id):
    marker = tmp_path / "pwned"
    (tmp_path / "pwnmod.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    response = post(owner_client, live_redis, env_id=env_id)
    (message,) = response.context["form"].errors["env_id"]
    assert "RLWEB_ENV_MODULES" in message
    assert not marker.exists()
    assert "this" not in sys.modules and "pwnmod" not in sys.modules and "trainer.__main__" not in sys.modules


def test_the_suggestions_offer_only_ids_that_can_be_made_here(owner_client):
    html = owner_client.get(reverse("experiment-new")).content.decode()
    datalist = html[html.index('<datalist id="env-ids">'):html.index("</datalist>")]
    assert '<option value="CartPole-v1">' in datalist and '<option value="Pendulum-v1">' in datalist
    for env_id in ["Ant-v2", "Hopper-v3", "GymV21Environment-v0", "phys2d/CartPole-v1", "tabular/CliffWalking-v0"]:
        assert f'value="{env_id}"' not in datalist


def test_hidden_layers_too_big_for_a_worker_are_refused_next_to_the_field(owner_client, live_redis):
    response = post(owner_client, live_redis, hp_hidden_layers="65536,65536")
    (message,) = response.context["form"].errors["hp_hidden_layers"]
    assert "this run would need about 128.0 GiB of memory" in message
    assert message in field_block(response.content.decode(), "hp_hidden_layers")


def test_a_replay_buffer_too_big_for_a_worker_is_refused_next_to_the_field(owner_client, live_redis, monkeypatch):
    monkeypatch.setenv("RLWEB_MAX_RUN_MEMORY_MB", "64")
    response = post(owner_client, live_redis, hp_buffer_size="5000000")
    (message,) = response.context["form"].errors["hp_buffer_size"]
    assert "more than the 64.0 MiB a run may use here" in message
