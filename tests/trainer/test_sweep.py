"""Hyperparameter sweeps with Optuna (trainer/sweep.py, `python -m trainer sweep`): the search space as typed,
checked against the algorithm's bounds; the objective; pruning on the evaluations as they come, which stops a
run early; a failed trial that does not stop the sweep; the grid sampler; trials in processes of their own."""

from __future__ import annotations

import optuna
import pytest

from trainer import sweep
from trainer.cli import main
from trainer.params import ConfigError

TINY = {"learning_starts": "50", "batch_size": "16", "buffer_size": "1000", "hidden_layers": "16"}


def fixed(**values) -> list[sweep.Dimension]:
    return [sweep.parse_dimension("dqn", f"{name}={value}") for name, value in values.items()]


def config(tmp_path, dimensions, **fields) -> sweep.SweepConfig:
    values = dict(total_steps=600, eval_interval=200, eval_episodes=1, trials=3, sampler="random", pruner="none",
                  preset=None, folder=tmp_path)
    values.update(fields)
    return sweep.SweepConfig("dqn", "CartPole-v1", dimensions, **values)


@pytest.mark.parametrize("text, expected", [
    ("learning_rate=1e-5:1e-2:log", dict(type=float, low=1e-5, high=1e-2, log=True, choices=())),
    ("batch_size=16:256", dict(type=int, low=16, high=256, log=False, choices=())),
    ("batch_size=32|64|32", dict(type=int, low=None, high=None, log=False, choices=(32, 64))),
    ("gamma=0.99", dict(type=float, low=None, high=None, log=False, choices=(0.99,))),
    ("double_q=true|false", dict(type=bool, low=None, high=None, log=False, choices=(True, False))),
])
def test_the_search_space_is_read_with_the_hyperparameters_own_types(text, expected):
    dimension = sweep.parse_dimension("dqn", text)
    assert {key: getattr(dimension, key) for key in expected} == expected
    assert dimension.fixed == (len(expected["choices"]) == 1)


def test_a_search_space_may_name_a_hyperparameter_by_another_spelling_and_searches_ours():
    decay = sweep.parse_dimension("qlearning", "epsilon_decay=0.99:0.9999")  # q-learning's name before
    assert (decay.name, decay.low, decay.high) == ("exploration_decay", 0.99, 0.9999)
    assert sweep.parse_dimension("es", "l2_coeff=0|0.01") == sweep.Dimension("l2_coef", float, choices=(0.0, 0.01))
    assert sweep.parse_dimension("ddpg", "lr_annealing=true|false").choices == ("linear", "constant")


@pytest.mark.parametrize("text, field, message", [
    ("learning_rat=1e-3:1e-2", "learning_rat", "dqn has no such hyperparameter"),
    ("learning_rate", "learning_rate", "expected NAME=LOW:HIGH"),
    ("learning_rate=1e-2:1e-3", "learning_rate", "low end must be below its high end"),
    ("learning_rate=-1:1", "learning_rate", "must be greater than 0"),
    ("learning_rate=1e-3:1e-2:ln", "learning_rate", "LOW:HIGH or LOW:HIGH:log"),
    ("gamma=0:0.99:log", "gamma", "a log scale needs a range above 0"),
    ("batch_size=16|many", "batch_size", "'many'"),
    ("double_q=false:true", "double_q", "of a number hyperparameter"),
])
def test_a_wrong_search_space_is_a_config_error_naming_the_hyperparameter(text, field, message):
    with pytest.raises(ConfigError) as error:
        sweep.parse_dimension("dqn", text)
    assert message in error.value.errors[field]


def test_the_median_pruner_waits_for_finished_trials_and_for_a_third_of_the_run_by_default(tmp_path):
    pruner = sweep.make_pruner(config(tmp_path, [], pruner="median", total_steps=90_000, trials=20))
    assert (pruner.startup_trials, pruner.warmup_steps) == (5, 30_000)
    pruner = sweep.make_pruner(config(tmp_path, [], pruner="median", startup_trials=2, warmup_steps=0))
    assert (pruner.startup_trials, pruner.warmup_steps) == (2, 0)


def test_each_process_of_a_sweep_draws_its_own_samples(tmp_path):
    def first_draws(process: int) -> list[float]:
        study = optuna.create_study(sampler=sweep.make_sampler(config(tmp_path, [], sampler="tpe"), process))
        return [study.ask().suggest_float("x", 0, 1) for _ in range(3)]

    assert first_draws(0) == first_draws(0)  # seeded
    assert first_draws(0) != first_draws(1)  # without their own seeds, two processes would try the same points


def test_the_objective_is_the_final_the_best_or_the_mean_of_the_last_evaluations():
    evaluations = [10.0, 50.0, 30.0, 20.0]
    assert sweep.objective_value(evaluations, "final") == 20.0
    assert sweep.objective_value(evaluations, "best") == 50.0
    assert sweep.objective_value(evaluations, "last-2") == 25.0
    assert sweep.objective_value(evaluations, "last-10") == 27.5
    for wrong in ("last", "last-0", "mean", "last--1"):
        with pytest.raises(ConfigError):
            sweep.check_objective(wrong)


def test_the_pruner_sees_the_trials_value_so_far_and_never_the_last_evaluation():
    class Trial:  # what the sink asks of an Optuna trial
        reports = []

        def report(self, value, step):
            self.reports.append((step, value))

        def should_prune(self):
            return False

    sink = sweep.PruningSink(Trial(), prune=True, total_steps=400, objective="last-2")
    for step, value in [(100, 10.0), (200, 30.0), (300, 20.0), (400, 90.0)]:
        sink.emit({"kind": "eval", "step": step, "values": {"eval/return_mean": value}})
    assert Trial.reports == [(100, 10.0), (200, 20.0), (300, 25.0)]  # the mean of the last two; 400 ends the run
    assert sink.evaluations == [10.0, 30.0, 20.0, 90.0] and not sink.should_stop()


def test_a_pruned_trial_stops_early_and_the_sweep_goes_on(tmp_path):
    every_one = optuna.pruners.ThresholdPruner(lower=10**9)  # prunes at the first evaluation it may
    study = sweep.sweep(config(tmp_path, fixed(**TINY), trials=2, total_steps=100_000), pruner=every_one)
    assert [trial.state.name for trial in study.trials] == ["PRUNED", "PRUNED"]
    for trial in study.trials:  # the runner asks the sink right after an evaluation: it stops there
        assert trial.user_attrs["pruned_at"] == 200 and trial.user_attrs["steps"] == 200


def test_a_trial_that_fails_is_recorded_and_the_sweep_goes_on(tmp_path):
    space = fixed(**TINY) + [sweep.parse_dimension("dqn", "hidden_layers=16|0")]  # "0": refused when made
    study = sweep.sweep(config(tmp_path, space, trials=6, sampler="random", seed=0))
    states = [trial.state.name for trial in study.trials]
    assert len(states) == 6 and "FAIL" in states and "COMPLETE" in states
    assert all(trial.params["hidden_layers"] == "0" for trial in study.trials if trial.state.name == "FAIL")
    assert study.best_value > 0


def test_the_grid_sampler_visits_every_point_once(tmp_path):
    space = fixed(learning_starts="50", buffer_size="1000", hidden_layers="16") + [
        sweep.parse_dimension("dqn", "batch_size=16|32"), sweep.parse_dimension("dqn", "gamma=0.9|0.99")]
    for jobs in (1, 2):  # processes of their own shuffle the grid alike: no point twice, none missed
        study = sweep.sweep(config(tmp_path, space, trials=4, sampler="grid", jobs=jobs, study_name=f"grid{jobs}"))
        points = sorted((trial.params["batch_size"], trial.params["gamma"]) for trial in study.trials)
        assert points == [(16, 0.9), (16, 0.99), (32, 0.9), (32, 0.99)], jobs
    with pytest.raises(ConfigError) as error:
        sweep.sweep(config(tmp_path, space + [sweep.parse_dimension("dqn", "tau=0.5:1")], sampler="grid"))
    assert "needs lists of values, not ranges (tau)" in error.value.errors["sampler"]


@pytest.mark.slow
def test_six_trials_two_at_once_with_the_median_pruner_give_a_best_value_and_prune(tmp_path, capsys):
    """With 2 at once, which trials have finished when another one is judged depends on timing: on a loaded machine
    a sweep's trials can all stay above the median of those finished before them. A second seed is tried then; a
    pruner that never prunes fails both."""
    for seed in ("1", "2"):
        storage = f"sqlite:///{tmp_path / f'sweep{seed}.db'}"
        code = main(["sweep", "dqn", "CartPole-v1", "--param", "learning_starts=100|20000", "--param",
                     "batch_size=32|64", "--total-steps", "4000", "--eval-interval", "1000", "--eval-episodes", "3",
                     "--trials", "6", "--jobs", "2", "--sampler", "random", "--seed", seed, "--pruner", "median",
                     "--startup-trials", "2", "--warmup-steps", "0", "--storage", storage])
        output = capsys.readouterr().out
        assert code == 0, output
        study = optuna.load_study(study_name="rlweb-sweep", storage=storage)
        states = [trial.state.name for trial in study.trials]
        if "PRUNED" in states:
            break
    assert len(states) == 6 and "PRUNED" in states and "COMPLETE" in states, output
    assert f"best: trial {study.best_trial.number}, value {study.best_value:.2f}" in output
    pruned = [trial for trial in study.trials if trial.state.name == "PRUNED"]
    assert all(trial.user_attrs["steps"] == trial.user_attrs["pruned_at"] < 4000 for trial in pruned)  # steps saved
    print(output)


def test_the_command_line_refuses_a_sweep_without_a_search_space(capsys):
    assert main(["sweep", "dqn", "CartPole-v1", "--total-steps", "100", "--eval-interval", "50"]) == 2
    assert "give at least one --param" in capsys.readouterr().err
    assert main(["sweep", "dqn", "CartPole-v1", "--param", "gama=0.9", "--total-steps", "100",
                 "--eval-interval", "50"]) == 2
    assert "error: gama: dqn has no such hyperparameter" in capsys.readouterr().err


def test_the_median_pruner_also_prunes_a_trial_tied_with_the_median_at_the_floor():
    """Optuna's median pruner never prunes a trial that ties the median; early in an RL sweep the median is the
    env's worst return, where every trial that has learned nothing sits (-500 on Acrobot-v1). Ours prunes a
    trial there, once others have done better; not a tie anywhere else, nor when no trial did better."""
    study = optuna.create_study(direction="maximize", pruner=sweep.median_pruner(n_startup_trials=3,
                                                                                 n_warmup_steps=200))

    def finished(*values):
        trial = study.ask()
        for step, value in enumerate(values, start=1):
            trial.report(value, step * 100)
        study.tell(trial, values[-1])

    def prunes(*values) -> bool:
        trial = study.ask()
        for step, value in enumerate(values, start=1):
            trial.report(value, step * 100)
        decision = trial.should_prune()
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return decision

    finished(-500, -500, -500)
    finished(-500, -500, -120)
    assert not prunes(-500, -500)  # too few finished trials
    finished(-500, -300, -90)
    assert not prunes(-500)  # in its warm-up
    assert prunes(-500, -500)  # at the floor at step 200, where 2 of 3 finished trials are and one did better
    assert not prunes(-500, -300)  # above the median (-500): not pruned
    assert not prunes(-500, -250)
    assert sweep.at_the_floor(-500, [-500, -500, -90]) and not sweep.at_the_floor(-500, [-500, -500, -500])
    assert not sweep.at_the_floor(500, [500, 500, 500]) and not sweep.at_the_floor(-500, [-500, -90, -80])
    assert not sweep.at_the_floor(-500, [])


def test_a_small_median_sweep_runs_on_the_command_lines_own_defaults(tmp_path, capsys):
    """--trials 3 --pruner median once failed on its own --startup-trials default (5), and --eval-interval was
    demanded: it defaults to a tenth of --total-steps."""
    storage = f"sqlite:///{tmp_path / 'sweep.db'}"
    code = main(["sweep", "dqn", "CartPole-v1", "--param", "learning_starts=50", "--param", "batch_size=16",
                 "--param", "hidden_layers=16", "--total-steps", "300", "--eval-episodes", "1", "--trials", "3",
                 "--pruner", "median", "--sampler", "random", "--storage", storage])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    study = optuna.load_study(study_name="rlweb-sweep", storage=storage)
    assert len(study.trials) == 3
    assert all(sorted(trial.intermediate_values) == list(range(30, 300, 30)) for trial in study.trials
               if trial.state.name == "COMPLETE")


def test_the_startup_trials_default_follows_the_number_of_trials():
    assert [sweep.default_startup_trials(trials) for trials in (1, 3, 8, 20, 100)] == [1, 1, 2, 5, 5]


def test_the_command_line_sweeps_for_the_fewest_steps_to_a_return(tmp_path, capsys):
    """The web form's threshold objective, on the command line: a trial's value is the step of its first
    evaluation at or above --threshold, and fewer is better."""
    storage = f"sqlite:///{tmp_path / 'sweep.db'}"
    args = ["sweep", "dqn", "CartPole-v1", "--param", "learning_starts=50", "--param", "batch_size=16",
            "--param", "hidden_layers=16", "--total-steps", "300", "--eval-interval", "100", "--eval-episodes", "1",
            "--trials", "2", "--pruner", "none", "--sampler", "random", "--objective", "threshold"]
    assert main(args + ["--storage", storage]) == 2
    assert "--threshold" in capsys.readouterr().err
    assert main(args + ["--threshold", "5", "--storage", storage]) == 0
    study = optuna.load_study(study_name="rlweb-sweep", storage=storage)
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    assert [trial.value for trial in study.trials] == [100, 100]  # CartPole's every episode returns more than 5
    assert main(args + ["--threshold", "1e6", "--storage", f"sqlite:///{tmp_path / 'never.db'}"]) == 0
    never = optuna.load_study(study_name="rlweb-sweep", storage=f"sqlite:///{tmp_path / 'never.db'}")
    assert [trial.value for trial in never.trials] == [600, 600]  # never reached: twice the budget
