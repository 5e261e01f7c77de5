"""What made a run (trainer/provenance.py) as the web app keeps it: recorded by the real training task on the run and
in its final checkpoint, a command that trains the same weights again, the run page's Environment card (and a
logged run's), the compare page's diff, and the API's run."""

from __future__ import annotations

import html
import re
import shlex

import torch
from django.urls import reverse
from trainer import cli
from trainer.checkpoint import read_checkpoint

from rlweb.experiments.models import Checkpoint, Run
from rlweb.logged import runs as logged_runs
from tests.web.api_helpers import owner_api  # noqa: F401  (fixture)


def final_checkpoint(run: Run) -> tuple[dict, dict]:
    with Checkpoint.objects.get(run=run, tag="final").file.open("rb") as stream:
        return read_checkpoint(stream)


def test_the_training_task_records_the_environment_on_the_run_and_in_its_checkpoint(trained_run):
    record = trained_run.environment
    assert record["torch"] == torch.__version__ and record["seed"] == trained_run.seed == 0
    assert record["device"] == "cpu" and record["host"] == trained_run.worker_host and record["start_step"] == 0
    assert {"rlweb_version", "rlweb_commit", "rlweb_dirty", "python", "cuda", "cudnn", "gymnasium", "ale_py",
            "mujoco", "cpu", "gpu"} <= set(record)
    words = shlex.split(record["command"])
    assert words[4:6] == ["dqn", "CartPole-v1"] and words[-2:] == ["--out", f"run-{trained_run.pk}"]
    assert words[words.index("--total-steps") + 1] == str(trained_run.total_steps)
    config, _ = final_checkpoint(trained_run)
    assert config["environment"] == record


def test_the_recorded_command_trains_the_same_weights_as_the_worker_did(trained_run, tmp_path):
    config, weights = final_checkpoint(trained_run)
    words = shlex.split(trained_run.environment["command"])
    words[words.index("--out") + 1] = str(tmp_path)
    assert cli.main(words[3:]) == 0  # `python -m trainer` with those arguments
    again, again_weights = read_checkpoint(tmp_path / "final.zip")
    assert again["hyperparameters"] == config["hyperparameters"] and again["seed"] == config["seed"]
    assert again["step"] == config["step"] == trained_run.total_steps
    assert all(torch.equal(again_weights[name], weights[name]) for name in weights) and again_weights.keys() == \
        weights.keys()


def test_the_run_page_shows_the_environment_with_a_copy_button_for_the_command(owner_client, trained_run):
    page = owner_client.get(reverse("run-detail", args=[trained_run.pk])).content.decode()
    card = page[page.index('id="run-environment"'):]
    card = card[:card.index("</section>")]
    assert re.search(rf'data-field="torch"[^>]*>{re.escape(torch.__version__)}<', card)
    assert f'title="{trained_run.environment["rlweb_commit"]}"' in card
    shown = re.search(r'<code id="repeat-command">(.*?)</code>', card, re.S).group(1)
    assert html.unescape(re.sub(r"</?span>", "", shown)) == trained_run.environment["command"]  # what Copy copies
    assert 'id="copy-command"' in card and "experiments/copy_command.js" in page
    assert owner_client.get("/static/experiments/copy_command.js").status_code == 200


def test_a_run_not_started_yet_says_when_it_is_recorded(owner_client, queued_run):
    page = owner_client.get(reverse("run-detail", args=[queued_run.pk])).content.decode()
    assert 'id="environment-empty"' in page and 'id="copy-command"' not in page
    assert "Recorded when a worker starts training the run: it shows here then." in page
    # claimed, its agent still being built: the record comes in a moment, and the page draws it again then
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING)
    page = owner_client.get(reverse("run-detail", args=[queued_run.pk])).content.decode()
    assert "Recorded when a worker starts training the run" in page and "Not recorded" not in page
    assert "experiments/copy_command.js" in page  # for the Copy button of the card drawn then
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.SUCCEEDED)  # trained before runs recorded it
    page = owner_client.get(reverse("run-detail", args=[queued_run.pk])).content.decode()
    assert "Not recorded: no worker trained this run, or one did before rlweb recorded" in page


def test_a_logged_run_shows_what_its_script_reported_in_the_same_card(owner_client, owner):
    run = logged_runs.create(owner, "mine", {"env_id": "CartPole-v1"}, host="lab-gpu-3",
                             command="python train.py --seed 1", git_commit="3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345",
                             client_version="0.1.0")
    page = owner_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    card = page[page.index('id="run-environment"'):]
    assert re.search(r'data-field="host"[^>]*>lab-gpu-3<', card)
    assert '<code title="3f2c9a1b7d4e5f60718293a4b5c6d7e8f9012345">3f2c9a1b7d4e</code>' in card
    assert '<code id="repeat-command"><span>python train.py</span> <span>--seed 1</span></code>' in card


def test_the_compare_page_names_the_one_thing_two_environments_differ_in(owner_client, make_experiment):
    experiment = make_experiment()
    record = {"rlweb_version": "0.1.0", "rlweb_commit": "a" * 40, "rlweb_dirty": False, "python": "3.12.3",
              "torch": "2.13.0", "cuda": None, "host": "box", "seed": 0, "command": "python -m trainer train ..."}
    first = Run.objects.create(experiment=experiment, seed=0, total_steps=400, environment=record)
    second = Run.objects.create(experiment=experiment, seed=1, total_steps=400,
                                environment={**record, "torch": "2.14.0", "seed": 1, "command": "other"})
    page = owner_client.get(reverse("compare") + f"?runs={first.pk},{second.pk}").content.decode()
    table = page[page.index('id="environment-table"'):]
    table = table[:table.index("</table>")]
    assert re.findall(r'<tr class="differs" data-field="([^"]+)"', table) == ["torch"]  # not the seed or command
    assert re.search(r"<code>2\.13\.0</code></td>\s*<td><code>2\.14\.0</code>", table)
    same = page[page.index('id="environment-same"'):]
    assert re.search(r'data-field="python">3\.12\.3<', same) and 'data-field="command"' not in same

    Run.objects.filter(pk=second.pk).update(environment={**record, "seed": 1})
    page = owner_client.get(reverse("compare") + f"?runs={first.pk},{second.pk}").content.decode()
    assert 'id="environment-all-same"' in page and 'id="environment-table"' not in page


def test_the_api_run_carries_its_environment(owner_api, trained_run):  # noqa: F811
    answer = owner_api.get(f"/api/runs/{trained_run.pk}").json()
    assert answer["environment"] == trained_run.environment and answer["environment"]["command"]
