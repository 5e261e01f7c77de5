"""The new-sweep form: the experiment form's first fields, the sweep's own settings, and one text field per
hyperparameter that holds a fixed value or a search range, as `python -m trainer sweep --param` reads them:

    0.001               fixed
    1e-5:1e-2:log       a range (whole numbers or not, as the hyperparameter is), on a log scale or not
    32|64|128           a list of choices

The fields start from the preset the algorithm has for the environment, as the experiment form's do (the same
script fills them). Every range's ends and every choice are checked by `trainer.validate`, so a sweep cannot
sample a value the algorithm refuses alone; a combination it refuses ends that trial only.
"""

from __future__ import annotations

import trainer
from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator
from django.template.defaultfilters import pluralize
from trainer import pbt as rules
from trainer.sweep import Dimension, parse_dimension

from rlweb.experiments.forms import (DEFAULT_ENV_ID, HYPERPARAMETER_PREFIX, algorithm_choices, bounds_text,
                                     default_algorithm, device_choices, preset_fields, processes_error)
from rlweb.experiments import storage_use
from rlweb.experiments.models import Experiment, Run, queue_of_device
from rlweb.projects import access
from rlweb.projects.models import Project
from rlweb.sweeps.models import OBJECTIVES, Sweep
from rlweb.sweeps.study import grid_size

MAX_TRIALS = 500
SEARCH_SYNTAX = "a value, LOW:HIGH, LOW:HIGH:log, or A|B|C"


def search_text(item: dict) -> str:
    """A stored dimension as the field shows it again (a sweep "around" another one)."""
    if item.get("choices"):
        return "|".join(str(choice) for choice in item["choices"])
    return f"{item['low']}:{item['high']}" + (":log" if item.get("log") else "")


class SweepForm(forms.Form):
    name = forms.CharField(max_length=200, initial="CartPole DQN sweep")
    algorithm = forms.ChoiceField(choices=algorithm_choices)
    env_id = forms.CharField(label="Environment id", max_length=200, initial=DEFAULT_ENV_ID,
                             widget=forms.TextInput(attrs={"list": "env-ids", "spellcheck": "false",
                                                           "autocomplete": "off"}))
    total_steps = forms.IntegerField(min_value=1, initial=50_000, help_text="Environment steps per trial and seed.")
    eval_interval = forms.IntegerField(min_value=1, max_value=10**9, initial=5_000,
                                       help_text="Env steps between evaluations: the pruner decides on them.")
    eval_episodes = forms.IntegerField(min_value=1, max_value=1_000, initial=5, help_text="Episodes per evaluation.")
    objective = forms.ChoiceField(choices=list(OBJECTIVES.items()), initial="last",
                                  help_text="A trial's value, averaged over its seeds.")
    last_evaluations = forms.IntegerField(label="N (last N evaluations)", min_value=1, max_value=100, initial=3)
    threshold = forms.FloatField(required=False, help_text="The return to reach, for “env steps to reach a return”.")
    sampler = forms.ChoiceField(choices=Sweep.Sampler.choices, initial=Sweep.Sampler.TPE)
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=0,
                              help_text="The sampler's seed: the same sweep samples the same values.")
    pruner = forms.ChoiceField(choices=Sweep.Pruner.choices, initial=Sweep.Pruner.MEDIAN,
                               help_text="Stops trials whose evaluations fall behind, to spend the steps elsewhere.")
    pruner_warmup_steps = forms.IntegerField(
        label="Pruner warm-up", required=False, min_value=0,
        help_text="Env steps of a trial before the median pruner may stop it; blank: a third of the run. An RL "
                  "curve is flat early: too short a warm-up stops late learners.")
    method = forms.ChoiceField(choices=Sweep.Method.choices, initial=Sweep.Method.OPTUNA, required=False,
                               help_text="Population-based training trains its trials together as a population: at "
                                         "each ready point the worst copy the best's checkpoints and perturb their "
                                         "values. It searches only settings that can change while a run trains.")
    trials = forms.IntegerField(min_value=1, max_value=MAX_TRIALS, initial=20,
                                help_text="The grid sampler runs every combination once, whatever this says. "
                                          "Population-based training: the population, all training at once.")
    parallel = forms.IntegerField(label="Trials at once", min_value=1, max_value=32, initial=2)
    seeds_per_trial = forms.IntegerField(min_value=1, max_value=10, initial=1,
                                         help_text="A trial's value is the mean over its seeds.")
    ready_interval = forms.IntegerField(
        required=False, min_value=1, help_text="Population-based training: env steps between the ready points, a "
                                               "multiple of the evaluation interval.")
    quantile = forms.FloatField(initial=rules.DEFAULT_QUANTILE, min_value=0.01, max_value=0.5, required=False,
                                help_text="Population-based training: the share of members that copy, and are copied.")
    resample_probability = forms.FloatField(
        initial=rules.DEFAULT_RESAMPLE_PROBABILITY, min_value=0, max_value=1, required=False,
        help_text="Population-based training: the chance that a copied value is drawn anew rather than multiplied "
                  "by 0.8 or 1.2.")
    device = forms.ChoiceField(choices=device_choices, initial=Experiment.Device.AUTO)
    preset = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    project = forms.ModelChoiceField(queryset=Project.objects.none(), required=False, empty_label="None: private",
                                     help_text="Its members see the sweep and its trials; its editors may also "
                                               "cancel, extend and delete it.")

    def __init__(self, *args, algorithm: str | None = None, owner=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.owner = owner
        if owner is not None:  # the projects the owner may start a sweep in: owned, or an editor of
            self.fields["project"].queryset = access.editable_projects(owner)
        most = settings.MAX_TOTAL_STEPS
        self.fields["total_steps"].validators.append(
            MaxValueValidator(most, message=f"At most {most:,} environment steps per run on this site."))
        names = trainer.algorithm_names()
        self.algorithm_name = algorithm if algorithm in names else default_algorithm()
        self.fields["algorithm"].initial = self.algorithm_name
        source = self.data if self.is_bound else self.initial
        try:
            start = preset_fields(self.algorithm_name, str(source.get("env_id") or DEFAULT_ENV_ID)[:200],
                                  str(source.get("preset") or "auto")[:100])
        except ValueError:
            start = preset_fields(self.algorithm_name, DEFAULT_ENV_ID, "none")
        self.chosen_preset = start["preset"]
        self.fields["preset"].initial = (start["preset"] or {}).get("name", "none")
        self.params = trainer.get_spec(self.algorithm_name).params()
        for param in self.params:
            help_text = " ".join(part for part in (param.help, f"Allowed: {bounds_text(param)}." if bounds_text(param)
                                                   else "", f"Default: {param.default}. Give {SEARCH_SYNTAX}.") if part)
            self.fields[HYPERPARAMETER_PREFIX + param.name] = forms.CharField(
                label=param.name, initial=start["values"][param.name], help_text=help_text, max_length=400,
                required=False, widget=forms.TextInput(attrs={"spellcheck": "false", "class": "search-field"}))

    @staticmethod
    def initial_from(experiment: Experiment) -> dict:
        """A sweep around an experiment: its settings, each hyperparameter fixed at its value."""
        values = {name: getattr(experiment, name) for name in ("algorithm", "env_id", "total_steps", "eval_episodes",
                                                                 "device")}
        values.update(name=f"{experiment.name} sweep"[:200], eval_interval=experiment.eval_interval or 5_000,
                      preset=experiment.preset or "none")
        for name, value in experiment.hyperparameters.items():
            text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
            values[HYPERPARAMETER_PREFIX + name] = text if text else "none"
        return values

    def common_fields(self):
        return [field for field in self if not field.name.startswith(HYPERPARAMETER_PREFIX) and not field.is_hidden]

    def hyperparameter_fields(self):
        return [field for field in self if field.name.startswith(HYPERPARAMETER_PREFIX)]

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("algorithm") and cleaned["algorithm"] != self.algorithm_name:
            self.add_error("algorithm", "The hyperparameters shown belong to another algorithm: choose it again.")
            return cleaned
        warmup, total = cleaned.get("pruner_warmup_steps"), cleaned.get("total_steps")
        if warmup is not None and total and warmup > total:
            self.add_error("pruner_warmup_steps", f"At most the steps per trial ({total:,}).")
        if cleaned.get("objective") == "threshold" and cleaned.get("threshold") is None:
            self.add_error("threshold", "Give the return to reach.")
        if "env_id" not in cleaned:
            return cleaned
        fixed, space = {}, []
        for param in self.params:
            text = (cleaned.get(HYPERPARAMETER_PREFIX + param.name) or "").strip()
            if not text:
                continue
            if ":" not in text and "|" not in text:
                fixed[param.name] = text
                continue
            try:
                dimension = parse_dimension(self.algorithm_name, f"{param.name}={text}")
            except trainer.ConfigError as error:
                self.add_error(HYPERPARAMETER_PREFIX + param.name, "; ".join(error.errors.values()))
                continue
            if dimension.fixed:
                fixed[param.name] = text.strip("|")
                continue
            space.append({"name": dimension.name, "type": dimension.type.__name__, "low": dimension.low,
                          "high": dimension.high, "log": dimension.log, "choices": list(dimension.choices)})
        if not space and not self.errors:
            self.add_error(None, f"Nothing to search: give at least one hyperparameter a range or choices "
                                 f"({SEARCH_SYNTAX}).")
        self.check_values(cleaned["env_id"], fixed, space)
        if cleaned.get("sampler") == Sweep.Sampler.GRID:
            ranges = [item["name"] for item in space if not item["choices"]]
            if ranges:
                self.add_error("sampler", f"The grid sampler needs lists of values, not ranges ({', '.join(ranges)}).")
            elif space:
                cleaned["trials"] = grid_size(space)
        cleaned["method"] = cleaned.get("method") or Sweep.Method.OPTUNA  # not posted: as before there was a choice
        if cleaned["method"] == Sweep.Method.PBT:
            self.clean_pbt(cleaned, space)
        self.check_room(cleaned)
        cleaned["fixed"], cleaned["space"] = fixed, space
        return cleaned

    def clean_pbt(self, cleaned: dict, space: list[dict]) -> None:
        """A population trains at once, one run a member, unpruned; it searches live settings only
        (trainer/pbt.py)."""
        cleaned.update(parallel=cleaned.get("trials"), seeds_per_trial=1, pruner=Sweep.Pruner.NONE,
                       sampler=Sweep.Sampler.RANDOM)
        ready, total, every = cleaned.get("ready_interval"), cleaned.get("total_steps"), cleaned.get("eval_interval")
        if ready is None:
            self.add_error("ready_interval", "Give the env steps between the ready points.")
        elif total and ready >= total:
            self.add_error("ready_interval", f"Below the steps per member ({total:,}), or nothing is ever copied.")
        elif every and ready % every:
            self.add_error("ready_interval", f"A multiple of the evaluation interval ({every:,}): a member is "
                                             "ranked on the evaluation at its ready point.")
        for name, default in (("quantile", rules.DEFAULT_QUANTILE),
                              ("resample_probability", rules.DEFAULT_RESAMPLE_PROBABILITY)):
            if cleaned.get(name) is None:
                cleaned[name] = default
        dimensions = [Dimension(item["name"], float, low=item["low"], high=item["high"], choices=tuple(item["choices"]))
                      for item in space]
        try:
            rules.check_dimensions(self.algorithm_name, dimensions)
            rules.check_rules(cleaned.get("trials") or 0, cleaned["quantile"], cleaned["resample_probability"])
        except trainer.ConfigError as error:
            for name, message in error.errors.items():
                field = {"population": "trials", "param": None}.get(name, name)
                if field not in (None, "quantile", "resample_probability", "trials"):
                    field = HYPERPARAMETER_PREFIX + name
                self.add_error(field if field in self.fields else None, message)

    def check_values(self, env_id: str, fixed: dict, space: list[dict]) -> None:
        """The fixed values together, then each end of each range and each choice with them; `processes` also
        against the cores of the chosen queue's workers, as the experiment form checks it."""
        tries = [({}, None)] + [({item["name"]: value}, item["name"]) for item in space
                                for value in (item["choices"] or (item["low"], item["high"]))]
        queue = queue_of_device(self.cleaned_data["device"]) if self.cleaned_data.get("device") else None
        for extra, name in tries:
            try:
                values = trainer.validate(self.algorithm_name, env_id, {**fixed, **extra})
                too_many = processes_error(values["processes"], queue) if queue and values["processes"] > 1 else None
                if too_many:
                    raise trainer.ConfigError({"processes": too_many})
            except trainer.ConfigError as error:
                for key, message in error.errors.items():
                    field = key if key in ("algorithm", "env_id") else HYPERPARAMETER_PREFIX + key
                    if field in self.fields and field not in self.errors:
                        prefix = f"with {name}={extra[name]}: " if name else ""
                        self.add_error(field, prefix + message)
                    elif field not in self.fields:
                        self.add_error(None, f"{key}: {message}")
                return

    def check_room(self, cleaned: dict) -> None:
        """Its trials at once must fit the site's limit of queued and running runs per user."""
        full = storage_use.full_message(self.owner) if self.owner is not None else None
        if full:
            self.add_error(None, full)
        if self.owner is None or not cleaned.get("parallel") or not cleaned.get("seeds_per_trial"):
            return
        runs = cleaned["parallel"] * cleaned["seeds_per_trial"]
        limit = settings.MAX_ACTIVE_RUNS_PER_USER
        if runs > limit:
            self.add_error("parallel", f"{runs} runs at once (trials at once × seeds per trial): this site allows "
                                       f"a user {limit} queued or running runs at a time.")

    def save(self, owner) -> Sweep:
        data = self.cleaned_data
        return Sweep.objects.create(
            owner=owner, name=data["name"], algorithm=self.algorithm_name, env_id=data["env_id"],
            preset="" if data.get("preset") in ("", "none", "auto") else data["preset"], fixed=data["fixed"],
            space=data["space"], total_steps=data["total_steps"], eval_interval=data["eval_interval"],
            eval_episodes=data["eval_episodes"], objective=data["objective"],
            last_evaluations=data["last_evaluations"], threshold=data.get("threshold"), sampler=data["sampler"],
            seed=data["seed"], pruner=data["pruner"], pruner_warmup_steps=data.get("pruner_warmup_steps"),
            trials=data["trials"], parallel=data["parallel"],
            seeds_per_trial=data["seeds_per_trial"], device=data["device"], project=data.get("project"),
            method=data["method"], ready_interval=data.get("ready_interval"),
            quantile=data.get("quantile") or rules.DEFAULT_QUANTILE,
            resample_probability=rules.DEFAULT_RESAMPLE_PROBABILITY if data.get("resample_probability") is None
            else data["resample_probability"])


class ExtendForm(forms.Form):
    more = forms.IntegerField(label="More trials", min_value=1, max_value=MAX_TRIALS, initial=10)


class LaunchBestForm(forms.Form):
    seeds = forms.IntegerField(label="Seeds", min_value=1, max_value=20, initial=3)

    def __init__(self, *args, owner=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.owner = owner

    def clean_seeds(self) -> int:
        seeds = self.cleaned_data["seeds"]
        full = storage_use.full_message(self.owner) if self.owner is not None else None
        if full:
            raise forms.ValidationError(full)
        active = Run.active_count(self.owner.pk) if self.owner is not None else 0
        if self.owner is not None and active + seeds > settings.MAX_ACTIVE_RUNS_PER_USER:
            raise forms.ValidationError(f"You have {active} queued or running run{pluralize(active)}; this site allows "
                                        f"{settings.MAX_ACTIVE_RUNS_PER_USER} at a time.")
        return seeds
