"""Notes on a run or an experiment: markdown its owner writes on the page, drawn as sanitised HTML.

Raw HTML in a note is not markdown here: it is shown as the text it is. What markdown makes is then cleaned
by nh3 to a small allow-list of tags, with http(s) and mailto links only, each rel="nofollow noopener".
"""

from __future__ import annotations

import markdown
import nh3
from django import forms
from django.utils.safestring import SafeString, mark_safe

MAX_LENGTH = 10_000
TAGS = {"p", "br", "hr", "em", "strong", "code", "pre", "blockquote", "ul", "ol", "li", "a", "h1", "h2", "h3",
        "h4", "h5", "h6"}
ATTRIBUTES = {"a": {"href", "title"}}
URL_SCHEMES = {"http", "https", "mailto"}


class NoteForm(forms.Form):
    notes = forms.CharField(required=False, max_length=MAX_LENGTH)  # the pages draw the textarea (_notes.html)


def render(text: str) -> SafeString:
    """`text` as markdown, raw HTML escaped, then cleaned to TAGS."""
    converter = markdown.Markdown(extensions=["fenced_code", "sane_lists"])
    converter.preprocessors.deregister("html_block")  # raw HTML blocks and inline tags stay text
    converter.inlinePatterns.deregister("html")
    html = converter.convert(text)
    return mark_safe(nh3.clean(html, tags=TAGS, attributes=ATTRIBUTES, url_schemes=URL_SCHEMES,
                               link_rel="nofollow noopener noreferrer"))
