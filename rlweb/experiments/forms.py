"""The experiment form, built from the chosen algorithm's hyperparameter schema in `trainer`.

Each hyperparameter becomes a field `hp_<name>` showing its default, bounds and help. The values are
checked by `trainer.validate`, the same check the command line and the Python API use, and each
message it returns is shown next to its field. Algorithms are offered grouped by family, with the
chosen one's description under the list. `ExperimentForm.initial_from` fills the form from an
existing experiment (clone). The hyperparameters start from the preset the algorithm has for the
environment (`trainer.presets`: RL Zoo's tuned settings, or the environment family's), the one named
in the `preset` field, or the algorithm's own defaults with `preset=none`; values given in the query (typed
before a reload) go on top, and the experiment records the preset's name. The site's limits (settings.MAX_TOTAL_STEPS per run, and
settings.MAX_ACTIVE_RUNS_PER_USER queued or running runs per user) are refused next to their fields, and so
are more `processes` than the chosen queue's workers have cores (`processes_error`).
"""

from __future__ import annotations

import re
import uuid

import trainer
from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator
from trainer import presets
from trainer.envs import env_spaces
from trainer.notes import run_notes
from trainer.params import MAX_CHECKPOINTS, Param, interval_errors

from rlweb.experiments import storage_use, workers
from rlweb.experiments.models import Experiment, Run, queue_of_device
from rlweb.projects import access
from rlweb.projects.models import Project

HYPERPARAMETER_PREFIX = "hp_"
DEFAULT_ALGORITHM = "dqn"
DEFAULT_ENV_ID = "CartPole-v1"
MAX_TAGS = 8
TAG = re.compile(r"[A-Za-z0-9_.:+-](?:[A-Za-z0-9_.:+ -]{0,30}[A-Za-z0-9_.:+-])?")  # 1-32 characters


def algorithm_choices() -> list[tuple[str, list[tuple[str, str]]]]:
    """The algorithms grouped by family: the select shows one <optgroup> per family. Only those some live worker has
    (its package and version the same as here), when workers are known (workers.offered_algorithms)."""
    offered = workers.offered_algorithms()
    groups = [(family, [(spec.name, spec.name) for spec in specs if offered is None or spec.name in offered])
              for family, specs in trainer.algorithms_by_family()]
    return [(family, choices) for family, choices in groups if choices]


def device_choices() -> list[tuple[str, str]]:
    """auto, CPU and CUDA, then the named queues the admin declares (settings.NAMED_QUEUES)."""
    return [*Experiment.Device.choices, *((queue, f"queue {queue}") for queue in settings.NAMED_QUEUES)]


def processes_error(processes: int, queue: str) -> str | None:
    """Why a run may not train on `processes` processes on `queue`, or None. All of a run's processes train on the
    one worker that takes it: past its cores they only wait for each other (issue 27: processes=8 on a 2-core worker
    took 42 s to start and as long to cancel). The bound is the most cores a live worker of the queue reports; when
    none is known (no worker yet, or only workers that do not say) nothing is refused: a worker may start later,
    and the queue's notice says that none serves it."""
    cores = workers.most_cores(queue)
    if cores is None or processes <= cores:
        return None
    return (f"must be at most {cores}: the workers of queue {queue} have at most {cores} core"
            f"{'s' if cores != 1 else ''}, and all of a run's processes train on the one worker that takes it. More "
            f"processes than cores only wait for each other: slower to start, to train and to cancel.")


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
                                           f"Default: {param.default}.", param.aliases_text()) if part)
    if param.type is bool:
        return forms.BooleanField(label=param.name, required=False, initial=param.default, help_text=help_text)
    if param.choices:
        return forms.ChoiceField(label=param.name, choices=[(choice, choice) for choice in param.choices],
                                 initial=param.default, help_text=help_text)
    attributes = {"inputmode": {int: "numeric", float: "decimal"}.get(param.type, "text"), "spellcheck": "false",
                  "placeholder": str(param.default)}
    return forms.CharField(label=param.name, initial=param.default, help_text=help_text, max_length=200,
                           required=False, widget=forms.TextInput(attrs=attributes))


def default_name(algorithm: str, env_id: str) -> str:
    """The name a new experiment starts with: the environment without its namespace and version, then the
    algorithm ("CartPole DQN" for dqn on CartPole-v1, "Pong PPO" for ppo on ALE/Pong-v5)."""
    environment = re.sub(r"-v\d+$", "", env_id.rpartition(":")[2].rpartition("/")[2]) or env_id
    return f"{environment} {algorithm.upper()}"[:200]


def preset_fields(algorithm: str, env_id: str, choice: str) -> dict:
    """The experiment_preset endpoint's answer (see there); ValueError for an unknown algorithm or preset."""
    if algorithm not in trainer.algorithm_names():
        raise ValueError(f"unknown algorithm {algorithm[:50]!r}")
    if len(env_id) > 200 or len(choice) > 100:
        raise ValueError("env_id has at most 200 characters, preset 100")
    try:
        chosen = presets.resolve(algorithm, env_id, choice or presets.AUTO)
    except trainer.ConfigError as error:
        raise ValueError(error.errors["preset"]) from None
    values = {param.name: param.default for param in trainer.get_spec(algorithm).params()}
    values.update(chosen.values if chosen else {})

    def described(preset):
        return preset and {"name": preset.name, "description": preset.description, "source": preset.source,
                            "no_equivalent": preset.no_equivalent, "total_steps": preset.total_steps}

    return {"preset": described(chosen), "available": described(presets.find(algorithm, env_id)),
            "default_name": default_name(algorithm, env_id),
            "values": {name: value if isinstance(value, bool) else str(value) for name, value in values.items()}}


class ExperimentForm(forms.ModelForm):
    class Meta:
        model = Experiment
        fields = ["name", "algorithm", "env_id", "num_seeds", "total_steps", "eval_interval", "eval_episodes",
                  "checkpoint_interval", "keep_checkpoints", "video_interval", "device", "auto_resume",
                  "max_auto_resumes", "tags", "description", "project",
                  "preset"]
        labels = {"auto_resume": "Resume lost runs by themselves", "max_auto_resumes": "At most this many times"}

    name = forms.CharField(max_length=200)  # initial: default_name, which the page's script keeps up to date
    algorithm = forms.ChoiceField(choices=algorithm_choices)
    env_id = forms.CharField(label="Environment id", max_length=200, initial=DEFAULT_ENV_ID,
                             help_text="Pick an installed Gymnasium or Atari id from the list as you type, or enter "
                                       "any id registered on the workers.",
                             widget=forms.TextInput(attrs={"list": "env-ids", "spellcheck": "false",
                                                           "autocomplete": "off"}))
    num_seeds = forms.IntegerField(label="Number of seeds", min_value=1, max_value=20, initial=1,
                                   help_text="One run per seed: seeds 0, 1, 2, ...")
    total_steps = forms.IntegerField(min_value=1, initial=50_000, help_text="Environment steps per run.")
    # at most settings.MAX_TOTAL_STEPS (set in __init__)
    eval_interval = forms.IntegerField(min_value=0, max_value=10**9, initial=5_000,
                                       help_text="Env steps between evaluations (0: only at the end).")
    eval_episodes = forms.IntegerField(min_value=0, max_value=1_000, initial=5,
                                       help_text="Episodes per evaluation (0: no evaluation).")
    checkpoint_interval = forms.IntegerField(min_value=0, max_value=10**9, initial=0,
                                             help_text="Env steps between periodic checkpoints (0: only the best "
                                                       "and final ones).")
    keep_checkpoints = forms.IntegerField(label="Periodic checkpoints kept", min_value=0, max_value=MAX_CHECKPOINTS,
                                          required=False,
                                          initial=Experiment._meta.get_field("keep_checkpoints").default,
                                          help_text="Per run, the latest ones; older ones are deleted as new ones come "
                                                    "(0: keep all). The best and final checkpoints are always kept.")
    video_interval = forms.IntegerField(min_value=0, max_value=10**9, initial=0,
                                        help_text="Env steps between recorded evaluation episodes (0: no videos).")
    device = forms.ChoiceField(choices=device_choices, initial=Experiment.Device.AUTO,
                               help_text="auto picks the GPU when the worker has one; CUDA runs go to GPU workers; a "
                                         "named queue goes to the workers started for it.")
    tags = forms.CharField(required=False, max_length=400, help_text=f"Comma-separated, at most {MAX_TAGS}, such as "
                                                                     "“baseline, lr-sweep”. For filtering the lists.",
                           widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}))
    auto_resume = forms.BooleanField(required=False, initial=True,
                                     help_text="When a worker dies, its run goes on from its latest checkpoint.")
    max_auto_resumes = forms.IntegerField(min_value=0, max_value=20, initial=3, required=False,
                                          help_text="Then the run ends failed with its error, instead of looping.")
    submission_token = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)
    # the preset's name, "none" for the plain defaults, "auto" for the environment's (the page resolves it)
    preset = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    description = forms.CharField(required=False, max_length=4000, widget=forms.Textarea(attrs={"rows": 3}),
                                  help_text="What this experiment tries out (optional).")

    def __init__(self, *args, algorithm: str | None = None, owner=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.owner = owner  # whose queued and running runs count against the limit (None: not checked)
        # the projects the owner may launch into (owned, or an editor of); none: a private experiment
        self.fields["project"].queryset = (access.editable_projects(owner) if owner is not None
                                           else Project.objects.none())
        self.fields["project"].empty_label = "None: private"
        self.fields["project"].help_text = "Its members see it; its editors may also cancel, resume and delete it."
        most = settings.MAX_TOTAL_STEPS
        self.fields["total_steps"].validators.append(
            MaxValueValidator(most, message=f"At most {most:,} environment steps per run on this site."))
        self.fields["total_steps"].widget.attrs["max"] = most
        names = trainer.algorithm_names()
        self.algorithm_name = algorithm if algorithm in names else default_algorithm()
        self.fields["submission_token"].initial = uuid.uuid4().hex  # one per form shown: a repost is recognised
        self.fields["algorithm"].initial = self.algorithm_name
        spec = trainer.get_spec(self.algorithm_name)
        self.fields["algorithm"].help_text = spec.description
        self.params = spec.params()
        for param in self.params:
            self.fields[HYPERPARAMETER_PREFIX + param.name] = hyperparameter_field(param)
        self.chosen_preset, self.environment_preset = self.start_from_preset()
        source = self.data if self.is_bound else self.initial
        automatic = default_name(self.algorithm_name, str(source.get("env_id") or DEFAULT_ENV_ID)[:200])
        self.fields["name"].initial = automatic  # where the query or the clone holds no name of its own
        self.fields["name"].widget.attrs["data-default-name"] = automatic  # a name equal to it is not the user's

    def start_from_preset(self):
        """(the preset the fields start from, or None; the one the environment has, or None). On a new form the
        fields show the preset's values where the query holds none of its own; a posted form keeps its values."""
        source = self.data if self.is_bound else self.initial
        env_id = str(source.get("env_id") or DEFAULT_ENV_ID)[:200]
        try:
            available = presets.find(self.algorithm_name, env_id)
            chosen = presets.resolve(self.algorithm_name, env_id, str(source.get("preset") or presets.AUTO)[:100])
        except (trainer.ConfigError, ValueError):  # an unknown name: no preset; a bound form says so in clean
            return None, None
        self.fields["preset"].initial = chosen.name if chosen else presets.NONE
        if not self.is_bound and chosen is not None:
            for name, value in chosen.values.items():
                field = self.fields.get(HYPERPARAMETER_PREFIX + name)
                if field is not None:
                    field.initial = value
            if chosen.total_steps and "total_steps" not in self.initial:
                self.fields["total_steps"].initial = min(chosen.total_steps, settings.MAX_TOTAL_STEPS)
        return chosen, available

    @staticmethod
    def initial_from(experiment: Experiment) -> dict:
        """Every value of `experiment`, hyperparameters included, as the form's initial data (a clone)."""
        initial = {name: getattr(experiment, name) for name in ExperimentForm.Meta.fields}
        initial["name"] = f"{experiment.name} (copy)"[:200]
        initial["tags"] = ", ".join(experiment.tags)
        initial["preset"] = experiment.preset or presets.NONE
        initial.update({HYPERPARAMETER_PREFIX + name: value for name, value in experiment.hyperparameters.items()})
        return initial

    def common_fields(self):
        return [field for field in self if not field.name.startswith(HYPERPARAMETER_PREFIX) and not field.is_hidden]

    def hyperparameter_fields(self):
        return [field for field in self if field.name.startswith(HYPERPARAMETER_PREFIX)]

    def clean_max_auto_resumes(self) -> int:
        value = self.cleaned_data["max_auto_resumes"]
        return Experiment._meta.get_field("max_auto_resumes").default if value is None else value

    def clean_keep_checkpoints(self) -> int:
        value = self.cleaned_data["keep_checkpoints"]
        return Experiment._meta.get_field("keep_checkpoints").default if value is None else value

    def clean_preset(self) -> str:
        """The name recorded on the experiment ("" for none); refused when the algorithm has no such preset."""
        name = self.cleaned_data["preset"] or presets.NONE
        if name in (presets.NONE, presets.AUTO):
            return self.chosen_preset.name if name == presets.AUTO and self.chosen_preset else ""
        if name not in {preset.name for preset in presets.listing(self.algorithm_name)}:
            raise forms.ValidationError(f"{self.algorithm_name} has no preset {name[:100]!r}.")
        return name

    def clean_tags(self) -> list[str]:
        return parse_tags(self.cleaned_data["tags"])

    def clean_device(self) -> str:
        """CUDA is refused when the gpu queue's live workers are known and none has a GPU: the run would fail on
        them. With none known it is accepted: a queued run waits for a GPU worker that starts later."""
        device = self.cleaned_data["device"]
        if device != Experiment.Device.CUDA:
            return device
        queue = queue_of_device(device)
        serving = [worker for worker in workers.live_workers() if queue in worker.queues]
        if serving and all(worker.device == "cpu" for worker in serving):
            names = ", ".join(worker.node for worker in serving[:5]) + (", ..." if len(serving) > 5 else "")
            raise forms.ValidationError(
                f"No worker of the {queue} queue has a GPU: {names} report{'s' if len(serving) == 1 else ''} only a "
                f"CPU, and a CUDA run would fail there. Choose auto or CPU, or start a worker with a GPU for the "
                f"{queue} queue. (While no worker serves the queue at all, CUDA is accepted and the run waits.)")
        return device

    def clean_num_seeds(self) -> int:
        """One run per seed; they may not take the owner past the site's limit of queued and running runs."""
        seeds = self.cleaned_data["num_seeds"]
        if self.owner is None:
            return seeds
        active = Run.active_count(self.owner.pk)
        limit = settings.MAX_ACTIVE_RUNS_PER_USER
        room = max(0, limit - active)
        if seeds > room:
            fits = f"{room} more seed{'s' if room != 1 else ''}" if room else "no more seeds"
            raise forms.ValidationError(
                f"You have {active} of the {limit} queued or running runs this site allows a user at a time, so "
                f"{fits} can start now. Wait for some to finish, or cancel them.")
        return seeds

    def clean(self):
        cleaned = super().clean()
        full = storage_use.full_message(self.owner) if self.owner is not None else None
        if full:
            self.add_error(None, full)
        if cleaned.get("total_steps"):
            for name, message in interval_errors(cleaned["total_steps"], cleaned.get("checkpoint_interval") or 0,
                                                 cleaned.get("video_interval") or 0).items():
                self.add_error(name, message[0].upper() + message[1:] + ".")
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
        offered = workers.offered_algorithms(queue_of_device(cleaned["device"])) if cleaned.get("device") else None
        if offered is not None and self.algorithm_name not in offered:
            self.add_error("algorithm", f"No live worker of the {queue_of_device(cleaned['device'])} queue has "
                                        f"{self.algorithm_name} from {trainer.origin(self.algorithm_name)}: install "
                                        f"that package on one, or choose another queue.")
        processes = cleaned.get("hyperparameters", {}).get("processes", 1)
        if processes > 1 and cleaned.get("device"):
            message = processes_error(processes, queue_of_device(cleaned["device"]))
            if message:
                self.add_error(HYPERPARAMETER_PREFIX + "processes", message)
        return cleaned

    def field_name(self, error_key: str) -> str | None:
        """The form field a trainer error key belongs to (None: a message for the whole form)."""
        if error_key in ("algorithm", "env_id"):
            return error_key
        name = HYPERPARAMETER_PREFIX + error_key
        return name if name in self.fields else None

    def run_notes(self) -> list[str]:
        """What the runs will do that the values alone do not say (trainer/notes.py), for a valid form."""
        spec = trainer.get_spec(self.algorithm_name)
        observation_space, _ = env_spaces(self.cleaned_data["env_id"])
        return run_notes(spec.build_config(self.cleaned_data["hyperparameters"]), observation_space,
                         self.cleaned_data.get("total_steps"))

    def earlier_submission(self, owner) -> Experiment | None:
        """The experiment this same form (its one-time token) already made, if it was posted before."""
        token = self.cleaned_data.get("submission_token")
        return Experiment.objects.filter(owner=owner, submission_token=token).first() if token else None

    def save(self, owner) -> Experiment:
        experiment = super().save(commit=False)
        experiment.owner = owner
        experiment.submission_token = self.cleaned_data.get("submission_token") or ""
        experiment.hyperparameters = self.cleaned_data["hyperparameters"]
        experiment.save()
        return experiment

