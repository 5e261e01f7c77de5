"""The new-suite form: algorithms, a list of environments (typed, or a named list), seeds and a budget, checked
per algorithm x environment by the experiment form itself (rlweb/experiments/forms.py), so a suite's tasks get
the same tuned presets, bounds and messages as an experiment made one at a time. A message from one task names
it ("dqn on Pendulum-v1: ...") and stands next to the suite's field it comes from.

Hyperparameters start from the preset the algorithm has for each environment (or the algorithm's defaults), and
the `overrides` field puts values on top, one a line: `name=value` for every chosen algorithm that has it, or
`algorithm.name=value` for one.
"""

from __future__ import annotations

import re
import uuid

import trainer
from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator
from django.template.defaultfilters import pluralize

from rlweb.experiments import storage_use
from rlweb.experiments.forms import (HYPERPARAMETER_PREFIX, ExperimentForm, algorithm_choices, default_name,
                                     device_choices, preset_fields)
from rlweb.experiments.models import Experiment
from rlweb.projects import access
from rlweb.projects.models import Project
from rlweb.suites.models import Suite

# Named lists of environments, each with where it comes from.
ENV_LISTS = {
    "classic": ("Classic control", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
                                    "Pendulum-v1"],
                "Gymnasium's classic-control family: https://gymnasium.farama.org/environments/classic_control/"),
    "box2d": ("Box2D", ["LunarLander-v3", "LunarLanderContinuous-v3", "BipedalWalker-v3", "CarRacing-v3"],
              "Gymnasium's Box2D family: https://gymnasium.farama.org/environments/box2d/"),
    "mujoco": ("MuJoCo", ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5"],
               "The five MuJoCo tasks most continuous-control papers report (Gymnasium's MuJoCo family: "
               "https://gymnasium.farama.org/environments/mujoco/)"),
    # Aitchison, Sweetser and Hutter (2023), "Atari-5: Distilling the Arcade Learning Environment down to Five
    # Games", ICML, https://arxiv.org/abs/2210.02019: five games whose scores predict the 57-game median.
    "atari5": ("Atari-5", ["ALE/BattleZone-v5", "ALE/DoubleDunk-v5", "ALE/NameThisGame-v5", "ALE/Phoenix-v5",
                           "ALE/Qbert-v5"],
               "Aitchison et al. 2023, “Atari-5: Distilling the Arcade Learning Environment down to Five Games”: "
               "https://arxiv.org/abs/2210.02019"),
}
MAX_ALGORITHMS = 8
MAX_ENVS = 30
MAX_TASKS = 100
MAX_MESSAGES_PER_FIELD = 6
ENV_SEPARATORS = re.compile(r"[\s,]+")
OVERRIDE = re.compile(r"(?:(?P<algorithm>[A-Za-z0-9_.+-]+)\.)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*)")
# the experiment form's fields that the suite's share one name with; its other messages go to the field they name
SHARED_FIELDS = {"num_seeds", "total_steps", "eval_interval", "eval_episodes", "device"}


def parse_env_ids(text: str) -> list[str]:
    """"CartPole-v1, Acrobot-v1\nPendulum-v1" -> the ids in order, repeats dropped."""
    ids = []
    for env_id in ENV_SEPARATORS.split(text.strip()):
        if env_id and env_id not in ids:
            ids.append(env_id)
    return ids


def parse_overrides(text: str) -> dict[str, dict[str, str]]:
    """"learning_rate=3e-4\nppo.n_steps=64" -> {"*": {"learning_rate": "3e-4"}, "ppo": {"n_steps": "64"}}."""
    overrides: dict[str, dict[str, str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = OVERRIDE.fullmatch(line)
        if not match:
            raise forms.ValidationError(f"Line {number} (“{line[:60]}”) is not name=value or algorithm.name=value.")
        overrides.setdefault(match["algorithm"] or "*", {})[match["name"]] = match["value"].strip()
    return overrides


class SuiteForm(forms.Form):
    name = forms.CharField(max_length=200, initial="Classic control benchmark")
    algorithms = forms.MultipleChoiceField(
        choices=algorithm_choices, widget=forms.CheckboxSelectMultiple, initial=["dqn", "ppo"],
        help_text=f"One or more (at most {MAX_ALGORITHMS}): each runs on every environment.")
    env_list = forms.ChoiceField(
        label="Named list", required=False, initial="classic",
        choices=[("", "none: the ids below")] + [(key, f"{label} ({len(ids)})") for key, (label, ids, _) in
                                                 ENV_LISTS.items()],
        help_text="Fills in the environments below; edit them as you like.")
    env_ids = forms.CharField(
        label="Environments", required=False, widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text=f"Gymnasium or Atari ids, one a line or comma-separated (at most {MAX_ENVS}); empty: the named list.")
    num_seeds = forms.IntegerField(label="Seeds", min_value=1, max_value=20, initial=3,
                                   help_text="Runs per algorithm and environment: seeds 0, 1, 2, ...")
    total_steps = forms.IntegerField(min_value=1, initial=50_000, help_text="Environment steps per run.")
    eval_interval = forms.IntegerField(min_value=0, max_value=10**9, initial=5_000,
                                       help_text="Env steps between evaluations (0: only at the end).")
    eval_episodes = forms.IntegerField(min_value=1, max_value=1_000, initial=5,
                                       help_text="Episodes per evaluation: a run's score is its final evaluation.")
    device = forms.ChoiceField(choices=device_choices, initial=Experiment.Device.AUTO)
    use_presets = forms.BooleanField(label="Start from tuned presets", required=False, initial=True,
                                     help_text="RL Zoo's settings (or the environment family's) where the algorithm "
                                               "has some for the environment; else the algorithm's defaults.")
    overrides = forms.CharField(
        label="Hyperparameters", required=False, max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false",
                                     "placeholder": "learning_rate=3e-4\nppo.n_steps=128"}),
        help_text="On top of the presets, one a line: name=value for every algorithm that has it, or "
                  "algorithm.name=value for one.")
    project = forms.ModelChoiceField(queryset=Project.objects.none(), required=False, empty_label="None: private",
                                     help_text="Its members see the suite and its runs; its editors may also "
                                               "cancel it.")
    submission_token = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)

    def __init__(self, *args, owner=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.owner = owner
        if owner is not None:  # the projects the owner may launch into: owned, or an editor of
            self.fields["project"].queryset = access.editable_projects(owner)
        most = settings.MAX_TOTAL_STEPS
        self.fields["total_steps"].validators.append(
            MaxValueValidator(most, message=f"At most {most:,} environment steps per run on this site."))
        self.fields["submission_token"].initial = uuid.uuid4().hex
        self.tasks: list[dict] = []  # once valid: {algorithm, env_id, hyperparameters, preset} per task

    def budget_fields(self):
        return [self[name] for name in ("num_seeds", "total_steps", "eval_interval", "eval_episodes", "device",
                                        "project", "use_presets")]

    def clean_algorithms(self) -> list[str]:
        chosen = self.cleaned_data["algorithms"]
        if len(chosen) > MAX_ALGORITHMS:
            raise forms.ValidationError(f"At most {MAX_ALGORITHMS} algorithms; {len(chosen)} are chosen.")
        return chosen

    def clean_env_ids(self) -> list[str]:
        env_ids = parse_env_ids(self.cleaned_data["env_ids"])
        named = self.data.get("env_list", "")
        if not env_ids and named in ENV_LISTS:
            env_ids = list(ENV_LISTS[named][1])
        if not env_ids:
            raise forms.ValidationError("Give at least one environment id, or choose a named list.")
        if len(env_ids) > MAX_ENVS:
            raise forms.ValidationError(f"At most {MAX_ENVS} environments; this has {len(env_ids)}.")
        too_long = [env_id for env_id in env_ids if len(env_id) > 200]
        if too_long:
            raise forms.ValidationError(f"“{too_long[0][:60]}...” is not an environment id: at most 200 characters.")
        return env_ids

    def clean_num_seeds(self) -> int:
        """An experiment's seeds start together: they must fit the site's limit of queued and running runs."""
        seeds = self.cleaned_data["num_seeds"]
        limit = settings.MAX_ACTIVE_RUNS_PER_USER
        if seeds > limit:
            raise forms.ValidationError(f"At most {limit}: each algorithm's seeds on an environment start together, "
                                        f"and this site allows a user {limit} queued or running runs at a time.")
        return seeds

    def clean_overrides(self) -> dict[str, dict[str, str]]:
        return parse_overrides(self.cleaned_data["overrides"])

    def clean(self):
        cleaned = super().clean()
        full = storage_use.full_message(self.owner) if self.owner is not None else None
        if full:
            self.add_error(None, full)
        if self.errors or not all(key in cleaned for key in ("algorithms", "env_ids", "overrides")):
            return cleaned  # the tasks are checked once the suite's own fields are right
        tasks = len(cleaned["algorithms"]) * len(cleaned["env_ids"])
        if tasks > MAX_TASKS:
            self.add_error("env_ids", f"{tasks} algorithm x environment pairs: at most {MAX_TASKS} in one suite.")
            return cleaned
        if not self.check_override_names(cleaned["algorithms"], cleaned["overrides"]):
            return cleaned
        messages: dict[str | None, list[str]] = {}
        for env_id in cleaned["env_ids"]:
            for algorithm in cleaned["algorithms"]:
                self.check_task(algorithm, env_id, cleaned, messages)
        for field, texts in messages.items():
            for text in texts[:MAX_MESSAGES_PER_FIELD]:
                self.add_error(field, text)
            if len(texts) > MAX_MESSAGES_PER_FIELD:
                self.add_error(field, f"... and {len(texts) - MAX_MESSAGES_PER_FIELD} more like these.")
        return cleaned

    def check_override_names(self, algorithms: list[str], overrides: dict[str, dict[str, str]]) -> bool:
        """Each override names a chosen algorithm and a hyperparameter it has (a shared one, some chosen algorithm)."""
        names = {algorithm: {param.name for param in trainer.get_spec(algorithm).params()} for algorithm in algorithms}
        for target, values in overrides.items():
            if target != "*" and target not in names:
                self.add_error("overrides", f"{target[:50]} is not one of the chosen algorithms.")
                continue
            known = names[target] if target != "*" else set().union(*names.values())
            for name in values:
                if name not in known:
                    owner = target if target != "*" else "none of the chosen algorithms"
                    self.add_error("overrides", f"{owner} has no hyperparameter “{name}”.")
        return "overrides" not in self.errors

    def check_task(self, algorithm: str, env_id: str, cleaned: dict, messages: dict) -> None:
        """Validate `algorithm` on `env_id` with the experiment form; keep its task, or its messages by field."""
        start = None
        try:
            start = preset_fields(algorithm, env_id, "auto" if cleaned.get("use_presets") else "none")
        except ValueError as error:
            messages.setdefault("env_ids", []).append(f"{algorithm} on {env_id}: {error}")
            return
        values = dict(start["values"])
        values.update({name: value for name, value in cleaned["overrides"].get("*", {}).items() if name in values})
        values.update(cleaned["overrides"].get(algorithm, {}))
        data = {"name": default_name(algorithm, env_id), "algorithm": algorithm, "env_id": env_id,
                "num_seeds": cleaned.get("num_seeds") or 1, "total_steps": cleaned.get("total_steps") or 1,
                "eval_interval": cleaned.get("eval_interval", 0), "eval_episodes": cleaned.get("eval_episodes") or 1,
                "checkpoint_interval": 0, "video_interval": 0, "device": cleaned.get("device") or "auto",
                "auto_resume": True, "max_auto_resumes": 3, "preset": (start["preset"] or {}).get("name", "none"),
                **{HYPERPARAMETER_PREFIX + name: value for name, value in values.items()}}
        # no owner: the suite checks the room for runs and the storage itself, and launches tasks as room opens
        form = ExperimentForm(data, algorithm=algorithm)
        if form.is_valid():
            self.tasks.append({"algorithm": algorithm, "env_id": env_id, "preset": form.cleaned_data["preset"],
                               "hyperparameters": form.cleaned_data["hyperparameters"]})
            return
        for field, errors in form.errors.items():
            target = {"algorithm": "algorithms", "env_id": "env_ids"}.get(field, field)
            if target.startswith(HYPERPARAMETER_PREFIX):
                name = target.removeprefix(HYPERPARAMETER_PREFIX)
                target = "overrides"
                errors = [f"{name}: {text}" for text in errors]
            elif target not in self.fields or target == "__all__":
                target = None
            for text in errors:
                text = text if target in SHARED_FIELDS else f"{algorithm} on {env_id}: {text}"
                if text not in messages.setdefault(target, []):
                    messages[target].append(text)

    def earlier_submission(self, owner) -> Suite | None:
        token = self.cleaned_data.get("submission_token")
        return Suite.objects.filter(owner=owner, submission_token=token).first() if token else None

    def save(self, owner) -> Suite:
        data = self.cleaned_data
        suite = Suite.objects.create(
            owner=owner, project=data.get("project"), name=data["name"], algorithms=data["algorithms"],
            env_ids=data["env_ids"], env_list=data.get("env_list") or "", num_seeds=data["num_seeds"],
            total_steps=data["total_steps"], eval_interval=data["eval_interval"], eval_episodes=data["eval_episodes"],
            device=data["device"], use_presets=bool(data.get("use_presets")), overrides=data["overrides"],
            submission_token=data.get("submission_token") or "")
        for position, task in enumerate(self.tasks):
            suite.tasks.create(position=position, **task)
        return suite

    def summary(self) -> str:
        data = self.cleaned_data
        tasks, seeds = len(self.tasks), data["num_seeds"]
        return (f"{len(data['algorithms'])} algorithm{pluralize(len(data['algorithms']))} x "
                f"{len(data['env_ids'])} environment{pluralize(len(data['env_ids']))}: {tasks} experiment"
                f"{pluralize(tasks)}, {tasks * seeds} run{pluralize(tasks * seeds)}")
