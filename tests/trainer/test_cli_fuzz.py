"""Property test of the command line: odd values for every argument of train, eval and list (NaN, infinities,
huge, negative, unicode, overlong, unknown --set keys, missing files, a folder as a checkpoint) each end in an
`error:` line and exit code 2 (or a successful run), never a Python traceback."""

import traceback

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trainer
from trainer.cli import main

ODD_NUMBERS = ["nan", "NaN", "inf", "-inf", "1e999", "-1", "0", "-0", "1.5", "1e3", str(2**63), str(2**64 + 1),
               "9" * 40, "0x10", "", " ", "٣", "½", "1_000", "\x00", "--", "-"]
ODD_TEXT = st.text(max_size=30) | st.sampled_from(["", " ", "é" * 300, "x" * 5000, "../../etc/passwd", "CON",
                                                    "\u202e", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "a=b=c", "=", "-h"])
NUMBER = (st.sampled_from(ODD_NUMBERS) | st.integers(-3, 3).map(str) | st.integers(-2**70, 2**70).map(str)
          | ODD_TEXT)
SMALL_STEPS = st.sampled_from(["1", "2"])  # valid step counts are kept tiny: a valid run then trains for an instant
ALGORITHM = st.sampled_from(["dqn", "ppo", "qlearning", "es", "no-such-algo", "", "DQN"]) | ODD_TEXT
ENV_ID = st.sampled_from(["CartPole-v1", "Pendulum-v1", "this:CartPole-v1", "pwnmod:CartPole-v1", "Ant-v2",
                          "phys2d/CartPole-v1", "NoSuch-v0", "CartPole-v1" + "x" * 300]) | ODD_TEXT
SET_ITEM = st.builds(lambda key, value: f"{key}={value}",
                     st.sampled_from(["learning_rate", "hidden_layers", "buffer_size", "gamma", "batch_size",
                                      "no_such_key", "", "__class__"]) | ODD_TEXT,
                     st.sampled_from(["65536,65536", "50000000", "0,0", "-3", "1e-3"]) | NUMBER) | ODD_TEXT
DEVICE = st.sampled_from(["cpu", "auto", "cuda", "cuda:99", "meta", "mps", "tpu", "cpu:0", ""]) | ODD_TEXT


def optional(flag: str, value_strategy):
    return st.one_of(st.just([]), value_strategy.map(lambda value: [flag, value]))


@st.composite
def train_arguments(draw, out_dir: str):
    args = ["train", draw(ALGORITHM), draw(ENV_ID), "--total-steps", draw(SMALL_STEPS | NUMBER)]
    args += draw(st.sampled_from([["--out", out_dir], ["--out", out_dir + "/" + "x" * 300], ["--out", "/proc/nope"],
                                  []]))
    for flag in ("--seed", "--eval-interval", "--eval-episodes", "--checkpoint-interval", "--video-interval",
                 "--threads"):
        args += draw(optional(flag, NUMBER))
    args += draw(optional("--device", DEVICE))
    for item in draw(st.lists(SET_ITEM, max_size=3)):
        args += ["--set", item]
    return args


@st.composite
def eval_arguments(draw, checkpoints: list[str]):
    args = ["eval", draw(st.sampled_from(checkpoints) | ODD_TEXT)]
    args += draw(optional("--episodes", st.sampled_from(["1", "2"]) | NUMBER))
    args += draw(optional("--seed", NUMBER))
    args += draw(optional("--device", DEVICE))
    return args


def other_arguments():
    return st.one_of(st.just(["list"]), st.tuples(st.just("list"), st.just("--params"), ALGORITHM).map(list),
                     st.lists(ODD_TEXT, max_size=4), st.just([]))


# Whole numbers argparse accepts, so the run gets past parsing to rlweb's own checks; values that would be
# valid and long (many steps or episodes) are left out
HUGE = st.sampled_from([2**31, 2**63, 2**64, 10**30, -10**30]) | st.integers(-2**70, 2**70)
STEPS = st.sampled_from([1, 2, 0, -1, 10**12 + 1]) | HUGE.filter(lambda n: not 2 < n <= 10**12)
EPISODES = st.sampled_from([1, 2, 0, -1, 10**6 + 1]) | HUGE.filter(lambda n: not 2 < n <= 10**6)
THREADS = st.sampled_from([1, 2, 0, -5, 1025]) | HUGE.filter(lambda n: not 2 < n <= 1024)
INTERVAL = st.sampled_from([0, -1, 10**12 + 1]) | HUGE.filter(lambda n: not 0 <= n <= 10**12)


def numbers(strategy):
    return strategy.map(str)


@st.composite
def parsed_train_arguments(draw, out_dir: str):
    args = ["train", draw(ALGORITHM), draw(ENV_ID), "--total-steps", draw(numbers(STEPS)), "--out",
            draw(st.sampled_from([out_dir, out_dir + "/" + "x" * 300, "/proc/nope", "/dev/null"]))]
    for flag, strategy in (("--seed", HUGE), ("--eval-interval", INTERVAL), ("--eval-episodes", EPISODES),
                           ("--checkpoint-interval", INTERVAL), ("--video-interval", INTERVAL),
                           ("--threads", THREADS)):
        args += draw(optional(flag, numbers(strategy)))
    args += draw(optional("--device", DEVICE))
    for item in draw(st.lists(SET_ITEM, max_size=3)):
        args += ["--set", item]
    return args


@st.composite
def parsed_eval_arguments(draw, checkpoints: list[str]):
    args = ["eval", draw(st.sampled_from(checkpoints))]
    args += draw(optional("--episodes", numbers(EPISODES)))
    args += draw(optional("--seed", numbers(HUGE)))
    args += draw(optional("--device", DEVICE))
    return args


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    good = trainer.make("dqn", "CartPole-v1", hidden_layers="8", buffer_size=100, batch_size=8).save(folder / "good.zip")
    garbage = folder / "garbage.zip"
    garbage.write_bytes(b"PK\x03\x04 not really")
    return folder, [str(good), str(garbage), str(folder), str(folder / "missing.zip"), "/dev/null", "/proc/self/mem"]


INPUTS_TRIED = []
OUTCOMES = {"usage error (argparse)": 0, "error line from rlweb": 0, "ran": 0}


def check_command_line(args, capsys) -> None:
    INPUTS_TRIED.append(args)
    try:
        code = main(args)
    except SystemExit as exit:  # argparse: usage and a message
        code = exit.code
    except BaseException:
        pytest.fail(f"main({args!r}) raised:\n{traceback.format_exc()}")
    output = capsys.readouterr()
    assert "Traceback" not in output.err
    assert code in (0, 2), (args, code, output.err[-2000:])
    if code == 2:
        assert "error:" in output.err, (args, output.err[-2000:])
    OUTCOMES["ran" if code == 0 else "usage error (argparse)" if "usage:" in output.err else "error line from rlweb"] += 1


FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


@FUZZ
@given(data=st.data())
def test_any_command_line_gives_an_error_line_and_exit_code_2_never_a_traceback(files, capsys, data):
    folder, checkpoints = files
    check_command_line(data.draw(st.one_of(train_arguments(str(folder / "out")), eval_arguments(checkpoints),
                                           other_arguments())), capsys)


@FUZZ
@given(data=st.data())
def test_command_lines_that_parse_are_checked_by_rlweb_with_an_error_line_never_a_traceback(files, capsys, data):
    folder, checkpoints = files
    check_command_line(data.draw(st.one_of(parsed_train_arguments(str(folder / "out")),
                                           parsed_eval_arguments(checkpoints))), capsys)


def test_report_the_number_of_command_lines_tried(capsys):
    with capsys.disabled():
        print(f"\ncommand lines tried: {len(INPUTS_TRIED)}: {OUTCOMES}")
