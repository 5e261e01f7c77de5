"""Population-based training's rules and the command line's local loop (trainer/pbt.py)."""

from __future__ import annotations

import random

import pytest

from trainer import pbt
from trainer.cli import main
from trainer.params import ConfigError
from trainer.sweep import Dimension

LEARNING_RATE = Dimension("learning_rate", float, low=1e-4, high=1e-2, log=True)
TINY = ["--param", "learning_starts=50", "--param", "batch_size=16", "--param", "buffer_size=1000",
        "--param", "hidden_layers=32,32", "--param", "train_frequency=4", "--param", "target_update_interval=50",
        "--param", "gradient_steps=1", "--preset", "none"]


def test_the_bottom_quarter_copies_one_of_the_top_quarter():
    scores = {0: 10.0, 1: 50.0, 2: -3.0, 3: 20.0, 4: 7.0, 5: 60.0, 6: 0.0, 7: 30.0}
    copies = pbt.exploit(scores, 0.25, random.Random(0))
    assert set(copies) == {2, 6}  # the two worst of eight
    assert set(copies.values()) <= {1, 5}  # each copies one of the two best
    assert pbt.exploit({0: 1.0, 1: 2.0, 2: 3.0}, 0.25, random.Random(0)) == {}  # a quarter of 3 is no member


def test_explore_multiplies_by_0_8_or_1_2_within_the_range_or_draws_anew():
    rng = random.Random(1)
    moved = [pbt.explore({"learning_rate": 1e-3}, [LEARNING_RATE], rng, 0.0)["learning_rate"] for _ in range(40)]
    assert {round(value, 9) for value in moved} == {8e-4, 1.2e-3}
    assert pbt.explore({"learning_rate": 1e-2}, [LEARNING_RATE], random.Random(2), 0.0)["learning_rate"] <= 1e-2
    drawn = {pbt.explore({"learning_rate": 1e-3}, [LEARNING_RATE], rng, 1.0)["learning_rate"] for _ in range(10)}
    assert len(drawn) == 10 and all(1e-4 <= value <= 1e-2 for value in drawn)
    steps = Dimension("n_steps", int, low=1, high=10)
    assert pbt.explore({"n_steps": 1}, [steps], random.Random(0), 0.0)["n_steps"] in (1, 2)  # whole, moved by one


def test_only_live_settings_may_be_searched():
    with pytest.raises(ConfigError) as error:
        pbt.check_dimensions("dqn", [Dimension("buffer_size", int, low=1000, high=5000)])
    assert "live" in error.value.errors["buffer_size"]
    pbt.check_dimensions("dqn", [LEARNING_RATE])


def test_the_command_line_trains_a_population_whose_worst_copy_the_best(capsys):
    code = main(["sweep", "dqn", "CartPole-v1", "--method", "pbt", "--population", "4", "--total-steps", "300",
                 "--ready-interval", "100", "--eval-episodes", "1", "--seed", "3", "--param",
                 "learning_rate=1e-4:1e-2:log", "--param", "exploration_final_eps=0.01:0.2", *TINY])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == [f"member {number}" for number in range(4)]
    assert "2 copies; 1200 env steps in all" in out  # one member copies at each of the ready points 100 and 200
    copies = [line for line in err.splitlines() if " copies member " in line]
    assert [line.split(":")[0] for line in copies] == ["step 100", "step 200"]
    # the member that copied goes on with the new values from the copied step: its schedule says so
    copied = copies[0].split("member ")[1].split(" ")[0]
    member = next(line for line in lines if line.startswith(f"member {copied}:"))
    assert "from step 100:" in member or "from step 200:" in member
    assert lines[-1].startswith("best: member ")


def test_the_command_line_refuses_a_setting_that_cannot_change_live(capsys):
    assert main(["sweep", "dqn", "CartPole-v1", "--method", "pbt", "--total-steps", "100",
                 "--param", "buffer_size=1000:5000"]) == 2
    assert "buffer_size" in capsys.readouterr().err
    assert main(["sweep", "dqn", "CartPole-v1", "--method", "pbt", "--total-steps", "300", "--ready-interval", "100",
                 "--eval-interval", "30", "--param", "learning_rate=1e-4:1e-2:log"]) == 2
    assert "multiple of the evaluation interval" in capsys.readouterr().err


def test_a_copy_takes_the_donors_weights_and_step_keeps_its_seed_and_goes_on_with_explored_values(tmp_path):
    import torch

    import trainer

    config = pbt.PbtConfig("dqn", "CartPole-v1", [LEARNING_RATE], total_steps=400, ready_interval=100,
                           population=2, resample_probability=0.0, folder=tmp_path)
    tiny = {"hidden_layers": "32,32", "buffer_size": 1000, "learning_starts": 50}
    members = [pbt.Member(number, trainer.make("dqn", "CartPole-v1", seed=number, device="cpu", learning_rate=rate,
                                               **tiny), {"learning_rate": rate})
               for number, rate in ((0, 1e-3), (1, 5e-3))]
    members[1].agent.steps_done = 100
    copy = pbt.copy_member(members[0], members[1], config, random.Random(0))
    agent = members[0].agent
    assert (copy.member, copy.donor, copy.step) == (0, 1, 100) and agent.steps_done == 100 and agent.seed == 0
    assert copy.old == {"learning_rate": 1e-3} and round(copy.new["learning_rate"] / 5e-3, 6) in (0.8, 1.2)
    assert agent.config.learning_rate == copy.new["learning_rate"]
    assert all(group["lr"] == copy.new["learning_rate"] for optimizer in agent.optimizers.values()
               for group in optimizer.param_groups)
    for name, module in agent.modules.items():
        for mine, theirs in zip(module.parameters(), members[1].agent.modules[name].parameters()):
            assert torch.equal(mine, theirs)
    assert members[0].schedule[-1] == (100, copy.new)


def test_the_whole_schedule_follows_each_copy_back_to_the_donors_own():
    firsts = {0: {"lr": 1}, 1: {"lr": 2}, 2: {"lr": 3}}
    copies = [(0, 1, 100, {"lr": 2.4}), (2, 0, 200, {"lr": 1.9}), (1, 2, 200, {"lr": 3.6})]
    assert pbt.whole_schedule(2, firsts, copies) == [(0, {"lr": 2}), (100, {"lr": 2.4}), (200, {"lr": 1.9})]
    assert pbt.whole_schedule(1, firsts, copies) == [(0, {"lr": 3}), (200, {"lr": 3.6})]
    assert pbt.whole_schedule(0, firsts, []) == [(0, {"lr": 1})]
