"""The library floor for target 2: what the chosen stack alone costs for a cold Atom feed.

Served under the same gunicorn settings as feedbridge, each request fetches the same page from the fake
forum with an httpx Client and renders the same topics to Atom with lxml's element tree (the library
feedbridge renders with), with the fields feedbridge writes. The topics are parsed once, at start-up: no
parsing, filtering, caching, cleaning, logging or error handling per request. A cold feedbridge request
costs this plus what is ours, so the gap between the two rows of the table is the part feedbridge can
still shrink.
"""

import os
from typing import Any

import httpx
from flask import Flask, Response
from lxml.etree import Element, SubElement, tostring

from feedbridge.discourse.listing import parse_listing
from feedbridge.render.formats import FORMATS

PAGE = os.environ["BENCH_PAGE_URL"]
client = httpx.Client(timeout=10)
TOPICS = parse_listing(client.get(PAGE).text, source_url=PAGE).topics
app = Flask(__name__)


def _text(parent: Any, tag: str, text: str) -> None:
    SubElement(parent, tag).text = text


@app.get("/feed")
def feed() -> Response:
    client.get(PAGE).raise_for_status()
    root = Element("feed", xmlns="http://www.w3.org/2005/Atom")
    _text(root, "id", PAGE)
    _text(root, "title", "floor")
    SubElement(root, "link", href=PAGE, rel="self")
    _text(root, "updated", max(topic.last_posted_at for topic in TOPICS).isoformat())
    _text(SubElement(root, "author"), "name", "forum")
    for topic in TOPICS:
        entry = SubElement(root, "entry")
        _text(entry, "id", f"{PAGE}/t/{topic.id}")
        _text(entry, "title", topic.title)
        SubElement(entry, "link", href=topic.url)
        _text(entry, "updated", topic.last_posted_at.isoformat())
        if topic.author:
            author = SubElement(entry, "author")
            _text(author, "name", topic.author)
            _text(author, "uri", topic.author_url)
        if topic.excerpt:
            _text(entry, "summary", topic.excerpt)
    return Response(tostring(root, encoding="UTF-8", xml_declaration=True), content_type=FORMATS["atom"].media_type)
