"""The library floor for target 2: what the chosen stack alone costs for a cold Atom feed.

Served under the same gunicorn settings as feedbridge, each request fetches the same page from the fake
forum with an httpx Client and renders the same topics to Atom with feedgen, with the fields feedbridge
writes. The topics are parsed once, at start-up: no parsing, filtering, caching, cleaning, logging or
error handling per request. A cold feedbridge request costs this plus what is ours, so the gap between
the two rows of the table is the part feedbridge can still shrink.
"""

import os

import httpx
from feedgen.feed import FeedGenerator
from flask import Flask, Response

from feedbridge.discourse.listing import parse_listing
from feedbridge.render.formats import FORMATS

PAGE = os.environ["BENCH_PAGE_URL"]
client = httpx.Client(timeout=10)
TOPICS = parse_listing(client.get(PAGE).text, source_url=PAGE).topics
app = Flask(__name__)


@app.get("/feed")
def feed() -> Response:
    client.get(PAGE).raise_for_status()
    fg = FeedGenerator()
    fg.id(PAGE)
    fg.title("floor")
    fg.link(href=PAGE, rel="self")
    fg.updated(max(topic.last_posted_at for topic in TOPICS))
    fg.author(name="forum")
    for topic in TOPICS:
        entry = fg.add_entry(order="append")
        entry.id(f"{PAGE}/t/{topic.id}")
        entry.title(topic.title)
        entry.link(href=topic.url)
        entry.updated(topic.last_posted_at)
        if topic.author:
            entry.author(name=topic.author, uri=topic.author_url)
        if topic.excerpt:
            entry.summary(topic.excerpt)
    return Response(fg.atom_str(), content_type=FORMATS["atom"].media_type)
