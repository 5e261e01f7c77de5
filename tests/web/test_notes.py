"""Notes on a run and on an experiment: markdown its owner writes on the page, rendered safely (no raw HTML,
script or javascript: link survives), 404 for strangers, CSRF, a length limit; the lists search them."""

from html.parser import HTMLParser

import pytest
from django.test import Client
from django.urls import reverse

from rlweb.experiments import notes
from rlweb.experiments.models import Experiment, Run

XSS = ["<script>alert('x')</script>", "<img src=x onerror=alert('x')>", "[click](javascript:alert('x'))",
       "[click](JaVaScRiPt:alert('x'))", "<a href=\"javascript:alert('x')\">click</a>",
       "<iframe src=\"https://evil.example\"></iframe>", "<div onmouseover=\"alert('x')\">hover</div>",
       "[click](https://ok.example \"t\\\" onclick=\\\"alert('x')\")", "[click](data:text/html,<script>alert('x')</script>)",
       "<svg/onload=alert('x')>", "```\n</code><script>alert('x')</script>\n```"]


def notes_url(thing) -> str:
    return reverse("run-notes" if isinstance(thing, Run) else "experiment-notes", args=[thing.pk])


@pytest.fixture(params=["run", "experiment"])
def thing(request, queued_run):
    return queued_run if request.param == "run" else queued_run.experiment


def test_markdown_renders_emphasis_lists_code_and_links():
    html = notes.render("*lr* **0.001** `gamma`\n\n- one\n- two\n\n1. first\n\n```\nx = 1\n```\n\n"
                        "[paper](https://arxiv.org/abs/1312.5602)")
    assert "<em>lr</em>" in html and "<strong>0.001</strong>" in html and "<code>gamma</code>" in html
    assert "<ul>\n<li>one</li>\n<li>two</li>\n</ul>" in html and "<ol>\n<li>first</li>\n</ol>" in html
    assert "<pre><code>x = 1\n</code></pre>" in html
    assert '<a href="https://arxiv.org/abs/1312.5602" rel="nofollow noopener noreferrer">paper</a>' in html


@pytest.mark.parametrize("payload", XSS)
def test_script_event_handlers_javascript_links_and_raw_html_are_neutralised(payload):
    for tag, attributes in elements_of(notes.render(payload)):
        assert tag in notes.TAGS
        for name, value in attributes:
            assert not name.startswith("on")
            assert not (value or "").strip().lower().startswith(("javascript:", "data:"))


def elements_of(html: str) -> list[tuple[str, list]]:
    """Every element a browser would make of `html`: (tag, [(attribute, value), ...])."""
    elements = []
    parser = HTMLParser()
    parser.handle_starttag = lambda tag, attributes: elements.append((tag, attributes))
    parser.feed(html)
    parser.close()
    return elements


def test_raw_html_is_shown_as_its_text():
    assert notes.render("a <b>bold</b> word") == "<p>a &lt;b&gt;bold&lt;/b&gt; word</p>"


def test_the_owner_saves_notes_and_the_page_shows_them_rendered(owner_client, thing):
    response = owner_client.post(notes_url(thing), {"notes": "lr too **high**\n\n<script>alert(1)</script>"})
    assert response.status_code == 302 and response["Location"] == thing.get_absolute_url()
    thing.refresh_from_db()
    assert thing.notes == "lr too **high**\n\n<script>alert(1)</script>"
    page = owner_client.get(thing.get_absolute_url()).content.decode()
    assert "lr too <strong>high</strong>" in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert(1)" not in page
    assert 'id="notes-form"' in page and 'name="csrfmiddlewaretoken"' in page.split('id="notes-form"')[1]


def test_an_empty_note_clears_the_notes(owner_client, thing):
    type(thing).objects.filter(pk=thing.pk).update(notes="old")
    assert owner_client.post(notes_url(thing), {"notes": ""}).status_code == 302
    thing.refresh_from_db()
    assert thing.notes == ""


def test_a_stranger_gets_404_and_cannot_edit(stranger_client, thing):
    type(thing).objects.filter(pk=thing.pk).update(notes="mine")
    assert stranger_client.get(thing.get_absolute_url()).status_code == 404
    assert stranger_client.post(notes_url(thing), {"notes": "theirs"}).status_code == 404
    thing.refresh_from_db()
    assert thing.notes == "mine"


def test_a_post_without_the_csrf_token_is_refused(owner, thing):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post(notes_url(thing), {"notes": "forged"}).status_code == 403
    thing.refresh_from_db()
    assert thing.notes == ""


def test_notes_only_take_a_post(owner_client, thing):
    assert owner_client.get(notes_url(thing)).status_code == 405


@pytest.mark.parametrize("text", ["x" * (notes.MAX_LENGTH + 1), "null \x00 byte"])
def test_too_long_notes_or_a_nul_character_are_refused_with_a_message(owner_client, thing, text):
    response = owner_client.post(notes_url(thing), {"notes": text}, follow=True)
    assert response.status_code == 200 and "Notes not saved" in response.content.decode()
    thing.refresh_from_db()
    assert thing.notes == ""


@pytest.fixture
def noted(make_experiment, stranger):
    """The owner's experiment with a note and a run with one, and a stranger's with the same words."""
    plain = make_experiment(name="plain")
    Run.objects.create(experiment=plain, total_steps=10, notes="diverged after the *reward scale* change")
    make_experiment(name="noted", notes="Compare with the **Double DQN** sweep")
    other = make_experiment(name="stranger's", owner=stranger, notes="Double DQN reward scale")
    Run.objects.create(experiment=other, total_steps=10, notes="reward scale")
    return plain


def names_in(page: str, names) -> set:
    return {name for name in names if f">{name}</a>" in page}


def test_the_experiment_list_finds_by_note_text_and_only_the_users_own(owner_client, noted):
    page = owner_client.get(reverse("experiment-list"), {"q": "double dqn"}).content.decode()
    assert names_in(page, ["plain", "noted", "stranger&#x27;s"]) == {"noted"}


def test_the_run_list_finds_by_the_runs_and_its_experiments_note_text_and_only_the_users_own(owner_client, noted):
    own_run = noted.runs.get()
    page = owner_client.get(reverse("run-list"), {"q": "REWARD SCALE"}).content.decode()
    shown = {int(pk) for pk in Run.objects.values_list("pk", flat=True) if f'data-run-id="{pk}"' in page}
    assert shown == {own_run.pk}
    noted_experiment = Experiment.objects.get(name="noted")
    run_of_noted = Run.objects.create(experiment=noted_experiment, total_steps=10)
    page = owner_client.get(reverse("run-list"), {"q": "Double DQN"}).content.decode()
    assert f'data-run-id="{run_of_noted.pk}"' in page and f'data-run-id="{own_run.pk}"' not in page
