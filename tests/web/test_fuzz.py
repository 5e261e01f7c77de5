"""Property-based tests (hypothesis) over the web side: the experiment form, every JSON/CSV endpoint, the live
stream and every query parameter take any input (NaN, infinities, huge and negative numbers, wrong types,
unknown keys, unicode with lone surrogates and NUL, overlong text) and answer a 4xx, a field error or a page
that says what it ignored: never a 500, and a refused form queues nothing.

Every request goes through `send`, which counts it; the module prints how many inputs were tried.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from urllib.parse import urlencode, urlsplit

import pytest
import trainer
from asgiref.sync import async_to_sync
from django.core.files.base import ContentFile
from django.test import AsyncClient
from django.urls import resolve, reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlweb.experiments.models import Event, Experiment, Run, Video
from tests.web.helpers import body_of, parse_sse
from tests.web.test_compare import add_events, returns

TRIED: Counter = Counter()  # requests sent, by URL name

# CI tries the same examples each time; RLWEB_FUZZ_EXAMPLES=2000 explores new ones (random) for longer
EXPLORE = int(os.environ.get("RLWEB_FUZZ_EXAMPLES", "0"))
FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None,
                derandomize=not EXPLORE, max_examples=EXPLORE or 60, database=None)

# Texts that have broken parsers before: numbers Python reads but a database or JSON cannot hold, numbers in
# other scripts, lone surrogates and NUL, markup, formulas, separators and overlong text.
NASTY = ["", " ", "0", "-0", "-1", "1", "+1", " 7 ", "1.5", "-1e-9", "nan", "NaN", "-nan", "inf", "-inf", "Infinity",
         "1e400", "-1e400", "1e308", "4.9e-324", "1e-400", "9" * 30, "-" + "9" * 30, str(2**63), str(2**64),
         str(-2**63 - 1), "0x1F", "0o17", "1_000", "1,000", "٣", "²", "１２", "Ⅻ", "∞", "True", "false", "None",
         "null", "[]", "{}", "[1, 2]", '{"a": 1}', "'", '"', "<script>alert(1)</script>", "\x00", "1\x00", "a\x00b",
         "\ud800", "\udfff", "x\udc80y", "\U0001f600", "é", "\u202e", "\n", "\r\n", "\t", "\x1c5", '=HYPERLINK("x")',
         "x" * 300, "9" * 5000, "-,", ",", ",,,", "1,2,3", "3 7 9", "3+7", "hp:", "hp:learning_rate", "hp:\x00",
         "-created", "--name", "step", "time", "std", "run"]
CHARACTERS = st.characters(codec=None) | st.sampled_from("\x00\ud800\udfff,+-. e0123456789")
TEXT = st.one_of(st.sampled_from(NASTY), st.text(CHARACTERS, max_size=30),
                 st.integers(min_value=-10**40, max_value=10**40).map(str), st.floats().map(str))


def some_of(names: list[str], values=TEXT):
    """Each of the named parameters or not, with any value, and a few unknown ones: (name, value) pairs."""
    known = st.fixed_dictionaries({}, optional={name: values for name in names}).map(lambda found: list(found.items()))
    return st.tuples(known, st.lists(st.tuples(TEXT, TEXT), max_size=2)).map(lambda both: both[0] + both[1])


def encoded(pairs) -> str:
    """A form or query string as a client might send it: lone surrogates become the bytes a careless encoder
    writes for them (invalid UTF-8)."""
    return urlencode(list(pairs), encoding="utf-8", errors="surrogatepass")


def send(client, method: str, url: str, pairs=(), **headers):
    """The response to `url` with `pairs` as its query (GET) or form body (POST), its body read to the end.
    Any status below 500 passes here; the tests check which."""
    body = encoded(pairs)
    if method == "get":
        response = client.get(f"{url}?{body}" if body else url, headers=headers)
    else:
        response = client.post(url, body, content_type="application/x-www-form-urlencoded", headers=headers)
    TRIED[resolve(urlsplit(url).path).url_name] += 1
    content = body_of(response)
    assert response.status_code < 500, (url, pairs, headers, content[:2000])
    return response, content


def header_text(value: str) -> str:
    """A header value as a WSGI server hands it over: the raw bytes read as Latin-1."""
    return value.encode("utf-8", "surrogatepass").decode("latin-1")


@pytest.fixture(scope="module", autouse=True)
def report_inputs_tried(request):
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if TRIED and capture is not None:
        with capture.global_and_fixture_disabled():
            counts = ", ".join(f"{name} {count}" for name, count in TRIED.most_common())
            print(f"\nfuzz: {sum(TRIED.values())} requests ({counts})")


# --- the experiment form -----------------------------------------------------------------------------

VALID_ENV = {"dqn": "CartPole-v1", "ppo": "CartPole-v1", "sac": "Pendulum-v1", "es": "CartPole-v1",
             "qlearning": "FrozenLake-v1", "r2d1": "CartPole-v1", "c51": "CartPole-v1"}
COMMON_FIELDS = ["name", "algorithm", "env_id", "num_seeds", "total_steps", "eval_interval", "eval_episodes",
                 "checkpoint_interval", "video_interval", "device", "tags", "description"]


def valid_form(algorithm: str) -> dict:
    data = {"name": "fuzz", "algorithm": algorithm, "env_id": VALID_ENV[algorithm], "num_seeds": "1",
            "total_steps": "1000", "eval_interval": "0", "eval_episodes": "1", "checkpoint_interval": "0",
            "video_interval": "0", "device": "cpu", "tags": "fuzz", "description": ""}
    data.update({f"hp_{param.name}": str(param.default) for param in trainer.get_spec(algorithm).params()})
    return data


HP_NAMES = sorted({f"hp_{param.name}" for name in VALID_ENV for param in trainer.get_spec(name).params()})
ENV_TEXT = TEXT.filter(lambda text: ":" not in text)  # `module:Env` ids import modules: helper t1's part


@st.composite
def experiment_posts(draw) -> list[tuple[str, str]]:
    """A valid form for one of several algorithms with some fields changed, some dropped, some repeated and
    some unknown ones added."""
    data = valid_form(draw(st.sampled_from(sorted(VALID_ENV))))
    names = st.sampled_from(COMMON_FIELDS + HP_NAMES) if draw(st.booleans()) else st.sampled_from(sorted(data))
    for name in draw(st.lists(names, min_size=1, max_size=5, unique=True)):
        data[name] = draw(ENV_TEXT if name == "env_id" else TEXT)
    for name in draw(st.lists(st.sampled_from(sorted(data)), max_size=2, unique=True)):
        del data[name]
    pairs = list(data.items()) + draw(st.lists(st.tuples(TEXT, TEXT), max_size=2))
    for name in draw(st.lists(st.sampled_from(sorted(data)), max_size=2)):
        pairs.append((name, draw(TEXT)))  # a field posted twice
    return pairs


def queued(redis_client) -> int:
    """Runs waiting for a worker (the scheduler sends them when one is free; test_scheduler.py), and messages sent."""
    waiting = Run.objects.filter(status=Run.Status.QUEUED).exclude(task_id="").count()
    return waiting + sum(redis_client.llen(queue) for queue in ("cpu", "gpu"))


def launched_or_refused(post, redis_client):
    """`post()` either re-shows the form with a message and makes and queues nothing, or makes the experiment
    with finite hyperparameters and queues one run per seed."""
    experiments, runs, tasks = Experiment.objects.count(), Run.objects.count(), queued(redis_client)
    response = post()
    if response.status_code == 200:
        assert response.context["form"].errors
        assert (Experiment.objects.count(), Run.objects.count(), queued(redis_client)) == (experiments, runs, tasks)
        return response
    assert response.status_code == 302
    experiment = Experiment.objects.latest("pk")
    assert experiment.runs.count() == experiment.num_seeds == Run.objects.count() - runs
    assert queued(redis_client) == tasks + experiment.num_seeds
    json.dumps(experiment.hyperparameters, allow_nan=False)  # no NaN or infinity stored
    return response


@pytest.mark.slow
@FUZZ
@given(pairs=experiment_posts())
def test_the_experiment_form_answers_any_post_with_field_errors_or_a_launch(
        pairs, owner_client, live_redis, django_capture_on_commit_callbacks):
    def post():
        with django_capture_on_commit_callbacks(execute=True):
            return send(owner_client, "post", reverse("experiment-new"), pairs)[0]

    launched_or_refused(post, live_redis)


NOT_NUMBERS = ["nan", "-inf", "inf", "1e400", "-1e400", "0x10", "1\x00", "x" * 300, "[1]"]
WORST_NUMBERS = NOT_NUMBERS + ["1e308", "-" + "9" * 30, "9" * 30, str(2**63), "-1", "0", "4.9e-324", "١٢"]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", trainer.algorithm_names())
def test_every_hyperparameter_of_every_algorithm_refuses_non_numbers_and_non_finite_numbers(
        algorithm, owner_client, live_redis, django_capture_on_commit_callbacks):
    """Every hp_ field given the same value at once, for each of the worst values."""
    data = {"name": "sweep", "algorithm": algorithm, "env_id": "CartPole-v1", "num_seeds": "1", "total_steps": "1000",
            "eval_interval": "0", "eval_episodes": "1", "checkpoint_interval": "0", "video_interval": "0",
            "device": "cpu"}
    params = trainer.get_spec(algorithm).params()
    numeric = [f"hp_{param.name}" for param in params if param.type in (int, float) and not param.choices]
    for value in WORST_NUMBERS:
        pairs = list(data.items()) + [(f"hp_{param.name}", value) for param in params]

        def post():
            with django_capture_on_commit_callbacks(execute=True):
                return send(owner_client, "post", reverse("experiment-new"), pairs)[0]

        response = launched_or_refused(post, live_redis)
        if value in NOT_NUMBERS:
            assert set(numeric) <= set(response.context["form"].errors), value


@pytest.mark.slow
@FUZZ
@given(pairs=some_of(["algorithm", *COMMON_FIELDS, *HP_NAMES[:10]]))
def test_the_new_experiment_page_fills_in_any_query(pairs, owner_client):
    """After a change of algorithm the page reloads with the values typed so far in its query."""
    response, _ = send(owner_client, "get", reverse("experiment-new"), pairs)
    assert response.status_code == 200


# --- the lists ---------------------------------------------------------------------------------------



@pytest.fixture
def some_runs(make_experiment):
    runs = []
    for name, tags in (("alpha", ["baseline"]), ("beta", ["lr-sweep", "x"])):
        experiment = make_experiment(name=name, tags=tags)
        runs += [Run.objects.create(experiment=experiment, seed=seed, total_steps=400) for seed in (0, 1)]
    returns(runs[0], [100, 200], [1.0, 2.0])
    return runs


@pytest.mark.slow
@FUZZ
@given(view=st.sampled_from(["experiment-list", "run-list"]), pairs=some_of(["q", "status", "algorithm", "env", "tag", "sort", "page"]))
def test_the_lists_answer_any_query_with_a_page(view, pairs, owner_client, some_runs):
    response, _ = send(owner_client, "get", reverse(view), pairs)
    assert response.status_code == 200


# --- a run's endpoints -------------------------------------------------------------------------------

@pytest.fixture
def finished_run(make_experiment):
    """A run that ended, with metric events, an evaluation and its final event stored."""
    run = Run.objects.create(experiment=make_experiment(), seed=0, total_steps=400, status=Run.Status.SUCCEEDED,
                             steps_done=400)
    returns(run, [100, 200, 300], [10.0, 20.0, 30.0])
    add_events(run, "eval", [(300, {"eval/return_mean": 25.0, "eval/return_std": 1.0})])
    add_events(run, "finished", [(400, {"status": "succeeded"})])
    return run


EVENT_VALUES = TEXT | st.lists(st.sampled_from(["episode", "train", "eval", "finished", "x", ""]), max_size=4).map(
    ",".join)


@pytest.mark.slow
@FUZZ
@given(view=st.sampled_from(["run-events", "run-history", "run-csv", "run-q-table", "run-detail"]),
       pairs=some_of(["after", "limit", "kinds", "last_id"], EVENT_VALUES))
def test_a_runs_endpoints_answer_any_query_with_data_or_a_400(view, pairs, owner_client, finished_run):
    response, content = send(owner_client, "get", reverse(view, args=[finished_run.pk]), pairs)
    if view == "run-q-table":  # a DQN run has no table to draw
        assert response.status_code == 404 and "error" in json.loads(content)
    elif response.status_code == 400:
        assert view == "run-events" and json.loads(content)["error"]
    else:
        assert response.status_code == 200


def stream_headers(last_event_id: str | None) -> dict:
    return {} if last_event_id is None else {"Last-Event-ID": header_text(last_event_id)}


LAST_EVENT_IDS = st.none() | TEXT | st.integers(min_value=-10**30, max_value=10**30).map(str)


def check_stream(status: int, content: bytes, run: Run) -> None:
    """A stream answered with every event after the id asked for and its end, or a 400 that says why."""
    if status == 400:
        assert "must be a whole number" in json.loads(content)["error"]
        return
    assert status == 200
    messages = parse_sse(content.decode())
    assert messages[-1]["event"] == "end"
    seqs = [int(message["id"]) for message in messages if message["event"] == "message" and message["data"]]
    assert seqs == sorted(seqs) and set(seqs) <= set(Event.objects.filter(run=run).values_list("seq", flat=True))


@pytest.mark.slow
@FUZZ
@given(last_event_id=LAST_EVENT_IDS, pairs=some_of(["last_id"], LAST_EVENT_IDS.filter(bool)))
def test_the_stream_answers_any_last_event_id_with_the_events_after_it_or_a_400(last_event_id, pairs, owner_client,
                                                                                 finished_run):
    response, content = send(owner_client, "get", reverse("run-stream", args=[finished_run.pk]), pairs,
                             **stream_headers(last_event_id))
    check_stream(response.status_code, content, finished_run)


def asgi_get(user, url: str, pairs=(), **headers) -> tuple[int, bytes]:
    """Status and whole body of a GET served by Django's ASGI handler (the async generator paths)."""
    async def read():
        client = AsyncClient()
        await client.aforce_login(user)
        query = encoded(pairs)
        response = await client.get(f"{url}?{query}" if query else url, headers=headers)
        if response.streaming:
            return response.status_code, b"".join([chunk async for chunk in response.streaming_content])
        return response.status_code, response.content

    status, content = async_to_sync(read)()
    TRIED[f"{resolve(url).url_name} (ASGI)"] += 1
    assert status < 500, content[:2000]
    return status, content


@pytest.mark.slow
@FUZZ
@given(last_event_id=LAST_EVENT_IDS, pairs=some_of(["last_id"], LAST_EVENT_IDS.filter(bool)))
def test_the_async_stream_answers_any_last_event_id_with_the_events_after_it_or_a_400(last_event_id, pairs, owner,
                                                                                       finished_run):
    status, content = asgi_get(owner, reverse("run-stream", args=[finished_run.pk]), pairs,
                               **stream_headers(last_event_id))
    check_stream(status, content, finished_run)


@pytest.mark.slow
@FUZZ
@given(view=st.sampled_from(["run-csv", "run-events"]), pairs=some_of(["after", "limit", "kinds"], EVENT_VALUES))
def test_the_async_csv_and_events_answer_any_query_with_data_or_a_400(view, pairs, owner, finished_run):
    status, content = asgi_get(owner, reverse(view, args=[finished_run.pk]), pairs)
    assert status == 200 or (status == 400 and view == "run-events" and json.loads(content)["error"])
    if view == "run-csv":
        assert content.decode().count("\n") == 1 + Event.objects.filter(run=finished_run).count()


# --- the compare page, its data and exports ----------------------------------------------------------

COMPARE_VIEWS = ["compare", "compare-data", "compare-export-csv", "compare-export-json"]
COMPARE_OPTIONS = TEXT | st.sampled_from(["hp:gamma", "hp:seed", "hp:learning_rate", "ci95", "minmax", "time", "1e308",
                                          "-1e308", "1e-320"])


@pytest.fixture
def compared(some_runs, stranger, make_experiment):
    """The owner's runs, one of a stranger's, and `hp:` groupings that exist."""
    secret = Run.objects.create(experiment=make_experiment(owner=stranger, name="secret"), seed=0, total_steps=400)
    return [run.pk for run in some_runs] + [secret.pk]


@st.composite
def compare_queries(draw, run_ids: list[int]) -> list[tuple[str, str]]:
    """Real run and experiment ids mixed with any text, and any chart options."""
    ids = st.sampled_from(run_ids + [0, 10**30]).map(str) | TEXT
    pairs = [("runs", draw(st.lists(ids, max_size=4).map(",".join)))] if draw(st.booleans()) else []
    pairs += draw(st.lists(st.tuples(st.just("experiment"), ids), max_size=2))
    pairs += draw(some_of(["group", "band", "x", "threshold", "smooth", "log"], COMPARE_OPTIONS))
    return pairs


@pytest.mark.slow
@FUZZ
@given(data=st.data(), view=st.sampled_from(COMPARE_VIEWS))
def test_the_compare_page_its_data_and_exports_answer_any_query_with_a_comparison_or_a_400(
        data, view, owner_client, compared):
    pairs = data.draw(compare_queries(compared))
    response, content = send(owner_client, "get", reverse(view), pairs)
    if response.status_code == 302:  # the page's canonical ?runs=... form
        assert view == "compare" and response["Location"].startswith(reverse("compare") + "?runs=")
        response, content = send(owner_client, "get", response["Location"])
    if response.status_code == 400:
        assert b"error" in content or view == "compare"
        return
    assert response.status_code == 200
    assert str(compared[-1]).encode() + b"," not in content.split(b"\n", 1)[-1] or view == "compare"


# --- odd ids in paths, as the owner and as a stranger -------------------------------------------------

GET_BY_ID = ["run-detail", "run-events", "run-stream", "run-history", "run-csv", "run-q-table", "video-file",
             "checkpoint-download", "experiment-detail", "experiment-clone"]
POST_BY_ID = ["run-cancel", "run-resume", "experiment-delete"]  # helper l1's views: fuzzed, not changed here
ODD_IDS = st.sampled_from([0, 1, 2, 2**31, 2**63 - 1, 2**63, 2**64, 10**30, 10**100]) | st.integers(min_value=0)


@pytest.mark.slow
@FUZZ
@given(view=st.sampled_from(GET_BY_ID + POST_BY_ID), object_id=ODD_IDS, as_owner=st.booleans(),
       pairs=st.lists(st.tuples(TEXT, TEXT), max_size=2))
def test_odd_ids_in_paths_answer_404_or_the_owners_page(view, object_id, as_owner, pairs, owner_client,
                                                        stranger_client, finished_run):
    method = "post" if view in POST_BY_ID else "get"
    client = owner_client if as_owner else stranger_client
    response, _ = send(client, method, reverse(view, args=[object_id]), pairs)
    if not as_owner or object_id != finished_run.pk or view in ("video-file", "checkpoint-download"):
        assert response.status_code == 404
    else:
        assert response.status_code in (200, 302, 404)


RANGES = st.sampled_from(["bytes=0-", "bytes=-5", "bytes=5-2", "bytes=0-0", "bytes=-0", "bytes=99-", "bytes=-",
                          "bytes=0-1,3-4", "bytes=" + "9" * 18 + "-", "bytes=-" + "9" * 18, "bytes=" + "9" * 30 + "-",
                          "items=0-1", "bytes=-1-2"]) | TEXT.map(lambda text: "bytes=" + text)


@pytest.mark.slow
@FUZZ
@given(byte_range=RANGES)
def test_a_video_answers_any_range_with_bytes_of_the_file_or_416(byte_range, owner_client, finished_run):
    video = Video.objects.filter(run=finished_run).first() or Video(run=finished_run, step=400, episode_return=1.0)
    if video.pk is None:
        video.file.save("episode.mp4", ContentFile(bytes(range(20))), save=True)
    response, content = send(owner_client, "get", reverse("video-file", args=[video.pk]),
                             Range=header_text(byte_range))
    assert response.status_code in (200, 206, 416)
    if response.status_code == 206:
        first, last = map(int, response["Content-Range"].removeprefix("bytes ").split("/")[0].split("-"))
        assert content == bytes(range(20))[first:last + 1] and content
    elif response.status_code == 200:
        assert content == bytes(range(20))


# --- what the fuzz found, kept as plain tests ---------------------------------------------------------

def test_an_experiment_number_too_large_for_the_database_is_left_out_of_a_comparison_with_a_message(
        owner_client, compared):
    response = owner_client.get(reverse("compare"), {"experiment": "9" * 30}, follow=True)
    assert response.status_code == 200 and response.context["runs"] == []
    assert "experiments asked for were left out" in response.content.decode()


@pytest.mark.parametrize("view", ["experiment-list", "run-list"])
@pytest.mark.parametrize("name", ["q", "env"])
def test_a_list_filter_holding_nul_is_ignored_with_a_message(owner_client, some_runs, view, name):
    response = owner_client.get(reverse(view), {name: "alpha\x00"})
    every = Experiment.objects.count() if view == "experiment-list" else len(some_runs)
    assert response.status_code == 200 and len(response.context["page"].object_list) == every
    assert f"The {name} filter holds a NUL character" in response.content.decode()


@pytest.mark.parametrize("last_event_id, first_seq", [("\x1c3", 4), (" 3\t", 4), ("\x1c", None)])
def test_a_last_event_id_around_whitespace_is_read_as_its_number(owner_client, finished_run, last_event_id, first_seq):
    response, content = send(owner_client, "get", reverse("run-stream", args=[finished_run.pk]),
                             **{"Last-Event-ID": last_event_id})
    if first_seq is None:
        assert response.status_code == 400 and "last_id must be a whole number" in json.loads(content)["error"]
    else:
        assert int(parse_sse(content.decode())[1]["id"]) == first_seq
