"""JSON Feed 1.1 (https://jsonfeed.org/version/1.1), written with `json`: feedgen, which writes Atom and RSS
(`render.documents`), has no JSON Feed. Its entries follow the same rules of identity, dates and characters
(`render.meta`); keys keep a fixed order, so the same topics give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from feedbridge import __version__
from feedbridge.models import Topic, iso_utc
from feedbridge.render.meta import FeedMeta, categories, cleaned, description, entry_id
from feedbridge.render.turns import take_turn

JSON_TYPE = "application/feed+json; charset=utf-8"
JSON_FEED_VERSION = "https://jsonfeed.org/version/1.1"


def render_json(meta: FeedMeta, topics: Sequence[Topic]) -> bytes:
    meta, topics = cleaned(meta, topics)
    feed: dict[str, object] = {"version": JSON_FEED_VERSION, "title": meta.title, "home_page_url": meta.html_url}
    if meta.self_url:
        feed["feed_url"] = meta.self_url
    feed["description"] = description(meta)
    if meta.site is not None:
        for name, url in (("icon", meta.site.icon_url), ("favicon", meta.site.favicon_url or meta.site.icon_url)):
            if url:
                feed[name] = url
        if meta.site.language:
            feed["language"] = meta.site.language
    feed["_feedbridge"] = {"version": __version__}
    feed["items"] = [_item(topic, meta.forum_url) for topic in topics]
    return json.dumps(feed, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _item(topic: Topic, forum_url: str) -> dict[str, object]:
    take_turn()
    item: dict[str, object] = {"id": topic.entry_id or entry_id(forum_url, topic.id), "url": topic.url,
                               "title": topic.title}
    # JSON Feed requires content_html or content_text on every item.
    if topic.content_html:
        item["content_html"] = topic.content_html
    else:
        item["content_text"] = topic.excerpt or topic.title
    if topic.excerpt:
        item["summary"] = topic.excerpt
    if topic.image_url:
        item["image"] = topic.image_url
    if topic.created_at:
        item["date_published"] = iso_utc(topic.created_at)
    if topic.last_posted_at:
        item["date_modified"] = iso_utc(topic.last_posted_at)
    if topic.author:
        author = {"name": topic.author}
        if topic.author_url:
            author["url"] = topic.author_url
        # `author` is deprecated in 1.1 but allowed beside `authors`; JSON Feed 1.0 readers know only it.
        item["authors"] = [author]
        item["author"] = author
    if tags := categories(topic):
        item["tags"] = tags
    if topic.replies is not None:
        item["_feedbridge"] = {"replies": topic.replies}
    return item
