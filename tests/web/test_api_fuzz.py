"""Property-based tests (hypothesis) of the API: the experiment and sweep create bodies, live changes, and the
query parameters of the lists and events take any JSON (NaN, infinities, huge numbers, wrong types, unknown
fields, nested junk, lone surrogates and NUL) or bytes that are no JSON at all, and answer a 2xx or a 4xx:
never a 500, and a refused create makes nothing. Every request is counted; the module prints how many."""

from __future__ import annotations

import json
import re
from collections import Counter
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlweb.experiments.models import Experiment, Run
from rlweb.sweeps.models import Sweep
from tests.web.api_helpers import TokenClient, owner_api  # noqa: F401  (fixtures)
from tests.web.test_api_experiments import TINY
from tests.web.test_api_sweeps_workers import SWEEP
from tests.web.test_fuzz import FUZZ, NASTY, TEXT

TRIED: Counter = Counter()

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**40, max_value=10**40), st.floats(), TEXT,
                    st.sampled_from(NASTY))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(TEXT, inner, max_size=3), max_leaves=6)


def send(client: TokenClient, method: str, path: str, body=None):
    """The answer to one request; anything below 500 passes here."""
    if method == "get":
        response = client.get(path)
    elif isinstance(body, bytes):
        response = client.post(path, body, content_type="application/json")
    else:
        text = json.dumps(body).encode("utf-8", "surrogatepass")  # NaN as NaN, lone surrogates as a careless encoder
        response = client.post(path, text, content_type="application/json")
    TRIED[re.sub(r"/[0-9]+", "/{id}", path.split("?")[0])] += 1
    assert response.status_code < 500, (path, body, response.content[:2000])
    return response


@st.composite
def changed(draw, valid: dict) -> dict | bytes:
    """A valid body with some fields changed to any JSON, some dropped, some unknown ones added; now and then
    bytes that are not a JSON object at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=40) | st.sampled_from([b"", b"[]", b"null", b"{", b'{"a":}', b"\xff\xfe"]))
    body = json.loads(json.dumps(valid))
    names = sorted(body) + [f"hyperparameters.{name}" for name in body.get("hyperparameters", {})]
    for name in draw(st.lists(st.sampled_from(names), max_size=4, unique=True)):
        outer, _, inner = name.partition(".")
        if inner and isinstance(body.get(outer), dict):
            body[outer][inner] = draw(JSON_VALUES)
        elif not inner:
            body[name] = draw(JSON_VALUES)
    for name in draw(st.lists(st.sampled_from(sorted(body)), max_size=2, unique=True)):
        del body[name]
    body.update(draw(st.dictionaries(TEXT, JSON_VALUES, max_size=2)))
    if isinstance(body.get("hyperparameters"), dict) and draw(st.booleans()):
        body["hyperparameters"].update(draw(st.dictionaries(TEXT, JSON_VALUES, max_size=2)))
    return body


@pytest.fixture(scope="module", autouse=True)
def report_inputs_tried(request):
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if TRIED and capture is not None:
        with capture.global_and_fixture_disabled():
            print(f"\napi fuzz: {sum(TRIED.values())} requests ({', '.join(f'{p} {n}' for p, n in TRIED.items())})")


@FUZZ
@given(body=changed(TINY))
def test_experiment_create_never_answers_500_and_a_refusal_makes_nothing(owner_api, body):
    before = (Experiment.objects.count(), Run.objects.count())
    response = send(owner_api, "post", "/api/experiments", body)
    if response.status_code >= 400:
        assert (Experiment.objects.count(), Run.objects.count()) == before
    else:
        assert response.status_code in (200, 201)


@pytest.mark.django_db(transaction=True)  # Optuna writes through its own connection
@FUZZ
@given(body=changed({**SWEEP, "trials": 1}))
def test_sweep_create_never_answers_500(owner_api, body):
    before = Sweep.objects.count()
    response = send(owner_api, "post", "/api/sweeps", body)
    if response.status_code >= 400:
        assert Sweep.objects.count() == before


@FUZZ
@given(body=changed({"values": {"learning_rate": 0.001, "exploration_final_eps": 0.05}}))
def test_a_live_change_never_answers_500(owner_api, queued_run, body):
    Run.objects.filter(pk=queued_run.pk).update(status=Run.Status.RUNNING)
    send(owner_api, "post", f"/api/runs/{queued_run.pk}/hyperparameters", body)


QUERY_NAMES = ["q", "status", "algorithm", "env", "tag", "sort", "page", "experiment", "after", "limit", "kinds"]


@FUZZ
@given(pairs=st.lists(st.tuples(st.sampled_from(QUERY_NAMES) | TEXT, TEXT), max_size=4))
def test_list_and_event_queries_never_answer_500(owner_api, trained_run, pairs):
    query = urlencode(pairs, encoding="utf-8", errors="surrogatepass")
    for path in ("/api/experiments", "/api/runs", f"/api/runs/{trained_run.pk}/events"):
        send(owner_api, "get", f"{path}?{query}")


@FUZZ
@given(number=st.integers(min_value=0, max_value=10**30))
def test_any_id_in_a_path_answers_404_not_500(owner_api, number):
    for path in (f"/api/runs/{number}", f"/api/experiments/{number}", f"/api/sweeps/{number}",
                 f"/api/checkpoints/{number}/download", f"/api/videos/{number}/download"):
        assert send(owner_api, "get", path).status_code == 404
