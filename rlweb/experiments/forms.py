"""The experiment form, built from the chosen algorithm's hyperparameter schema in `trainer`.

Each hyperparameter becomes a field `hp_<name>` showing its default, bounds and help. The values are
checked by `trainer.validate`, the same check the command line and the Python API use, and each
message it returns is shown next to its field. Algorithms are offered grouped by family, with the
chosen one's description under the list. `ExperimentForm.initial_from` fills the form from an
existing experiment (clone).
"""

from __future__ import annotations

import re

import trainer
from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm
from trainer.params import Param

from rlweb.experiments.models import Experiment

HYPERPARAMETER_PREFIX = "hp_"
DEFAULT_ALGORITHM = "dqn"
DEFAULT_ENV_ID = "CartPole-v1"
MAX_TAGS = 8
TAG = re.compile(r"[A-Za-z0-9_.:+-](?:[A-Za-z0-9_.:+ -]{0,30}[A-Za-z0-9_.:+-])?")  # 1-32 characters


def algorithm_choices() -> list[tuple[str, list[tuple[str, str]]]]:
    """The algorithms grouped by family: the select shows one <optgroup> per family."""
    return [(family, [(spec.name, spec.name) for spec in specs]) for family, specs in trainer.algorithms_by_family()]


def parse_tags(text: str) -> list[str]:
    """"cartpole, baseline ,lr-sweep" -> ["cartpole", "baseline", "lr-sweep"]; repeats (any case) dropped."""
    tags = []
    for tag in (part.strip() for part in text.split(",")):
        if not tag or tag.lower() in (kept.lower() for kept in tags):
            continue
        if not TAG.fullmatch(tag):
            raise forms.ValidationError(f"“{tag[:40]}” is not a tag: up to 32 letters, digits, spaces or - _ . : +.")
        tags.append(tag)
    if len(tags) > MAX_TAGS:
        raise forms.ValidationError(f"At most {MAX_TAGS} tags; this has {len(tags)}.")
    return tags


def default_algorithm() -> str:
    names = trainer.algorithm_names()
    return DEFAULT_ALGORITHM if DEFAULT_ALGORITHM in names else names[0]


def number_text(value: float) -> str:
    """50000000 rather than 5e+07; 0.001 and 1e-08 as Python writes them."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))


def bounds_text(param: Param) -> str:
    """"> 0, ≤ 1", "≥ 1", "one of a, b" or "" for a parameter's bounds."""
    if param.choices:
        return "one of " + ", ".join(map(str, param.choices))
    low = param.low is not None and f"{'≥' if param.low_inclusive else '>'} {number_text(param.low)}"
    high = param.high is not None and f"{'≤' if param.high_inclusive else '<'} {number_text(param.high)}"
    return ", ".join(part for part in (low, high) if part)


def hyperparameter_field(param: Param) -> forms.Field:
    """A form field that passes the raw text on to trainer's own parsing (so messages match the CLI)."""
    help_text = " ".join(part for part in (param.help, f"Allowed: {bounds_text(param)}." if bounds_text(param) else "",
                                           f"Default: {param.default}.") if part)
    if param.type is bool:
        return forms.BooleanField(label=param.name, required=False, initial=param.default, help_text=help_text)
    if param.choices:
        return forms.ChoiceField(label=param.name, choices=[(choice, choice) for choice in param.choices],
                                 initial=param.default, help_text=help_text)
    attributes = {"inputmode": {int: "numeric", float: "decimal"}.get(param.type, "text"), "spellcheck": "false",
                  "placeholder": str(param.default)}
    return forms.CharField(label=param.name, initial=param.default, help_text=help_text, max_length=200,
                           required=False, widget=forms.TextInput(attrs=attributes))


class ExperimentForm(forms.ModelForm):
    class Meta:
        model = Experiment
        fields = ["name", "algorithm", "env_id", "num_seeds", "total_steps", "eval_interval", "eval_episodes",
                  "checkpoint_interval", "video_interval", "device", "tags", "description"]
        help_texts = {"device": "auto picks the GPU when the worker has one; CUDA runs go to GPU workers."}

    name = forms.CharField(max_length=200, initial="CartPole DQN")
    algorithm = forms.ChoiceField(choices=algorithm_choices)
    env_id = forms.CharField(label="Environment id", max_length=200, initial=DEFAULT_ENV_ID,
                             help_text="Pick an installed Gymnasium or Atari id from the list as you type, or enter "
                                       "any id registered on the workers.",
                             widget=forms.TextInput(attrs={"list": "env-ids", "spellcheck": "false",
                                                           "autocomplete": "off"}))
    num_seeds = forms.IntegerField(label="Number of seeds", min_value=1, max_value=20, initial=1,
                                   help_text="One run per seed: seeds 0, 1, 2, ...")
    total_steps = forms.IntegerField(min_value=1, max_value=10**10, initial=50_000,
                                     help_text="Environment steps per run.")
    eval_interval = forms.IntegerField(min_value=0, max_value=10**9, initial=5_000,
                                       help_text="Env steps between evaluations (0: only at the end).")
    eval_episodes = forms.IntegerField(min_value=0, max_value=1_000, initial=5,
                                       help_text="Episodes per evaluation (0: no evaluation).")
    checkpoint_interval = forms.IntegerField(min_value=0, max_value=10**9, initial=0,
                                             help_text="Env steps between periodic checkpoints (0: only the best "
                                                       "and final ones).")
    video_interval = forms.IntegerField(min_value=0, max_value=10**9, initial=0,
                                        help_text="Env steps between recorded evaluation episodes (0: no videos).")
    tags = forms.CharField(required=False, max_length=400, help_text=f"Comma-separated, at most {MAX_TAGS}, such as "
                                                                     "“baseline, lr-sweep”. For filtering the lists.",
                           widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}))
    description = forms.CharField(required=False, max_length=4000, widget=forms.Textarea(attrs={"rows": 3}),
                                  help_text="What this experiment tries out (optional).")

    def __init__(self, *args, algorithm: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        names = trainer.algorithm_names()
        self.algorithm_name = algorithm if algorithm in names else default_algorithm()
        self.fields["algorithm"].initial = self.algorithm_name
        spec = trainer.get_spec(self.algorithm_name)
        self.fields["algorithm"].help_text = spec.description
        self.params = spec.params()
        for param in self.params:
            self.fields[HYPERPARAMETER_PREFIX + param.name] = hyperparameter_field(param)

    @staticmethod
    def initial_from(experiment: Experiment) -> dict:
        """Every value of `experiment`, hyperparameters included, as the form's initial data (a clone)."""
        initial = {name: getattr(experiment, name) for name in ExperimentForm.Meta.fields}
        initial["name"] = f"{experiment.name} (copy)"[:200]
        initial["tags"] = ", ".join(experiment.tags)
        initial.update({HYPERPARAMETER_PREFIX + name: value for name, value in experiment.hyperparameters.items()})
        return initial

    def common_fields(self):
        return [field for field in self if not field.name.startswith(HYPERPARAMETER_PREFIX)]

    def hyperparameter_fields(self):
        return [field for field in self if field.name.startswith(HYPERPARAMETER_PREFIX)]

    def clean_tags(self) -> list[str]:
        return parse_tags(self.cleaned_data["tags"])

    def clean(self):
        cleaned = super().clean()
        if "algorithm" not in cleaned or "env_id" not in cleaned:
            return cleaned
        if cleaned["algorithm"] != self.algorithm_name:
            self.add_error("algorithm", "The hyperparameters shown belong to another algorithm: choose it again.")
            return cleaned
        raw = {param.name: cleaned[HYPERPARAMETER_PREFIX + param.name] for param in self.params
               if cleaned.get(HYPERPARAMETER_PREFIX + param.name) not in (None, "")}  # empty: the default
        try:
            cleaned["hyperparameters"] = trainer.validate(self.algorithm_name, cleaned["env_id"], raw)
        except trainer.ConfigError as error:
            for name, message in error.errors.items():
                field = self.field_name(name)
                self.add_error(field, message if field else f"{name}: {message}")
        return cleaned

    def field_name(self, error_key: str) -> str | None:
        """The form field a trainer error key belongs to (None: a message for the whole form)."""
        if error_key in ("algorithm", "env_id"):
            return error_key
        name = HYPERPARAMETER_PREFIX + error_key
        return name if name in self.fields else None

    def save(self, owner) -> Experiment:
        experiment = super().save(commit=False)
        experiment.owner = owner
        experiment.hyperparameters = self.cleaned_data["hyperparameters"]
        experiment.save()
        return experiment


class SignupForm(UserCreationForm):
    """A new account. The first account of a fresh install also administers the site (/admin/)."""

    def save(self, commit=True):
        user = super().save(commit=False)
        if not get_user_model().objects.exists():
            user.is_staff = user.is_superuser = True
        if commit:
            user.save()
        return user
