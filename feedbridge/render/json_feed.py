"""JSON Feed 1.1 (https://jsonfeed.org/version/1.1), written with `json`: feedgen, which writes Atom and RSS
(`render.documents`), has no JSON Feed. Its entries follow the same rules of identity, dates and characters
(`render.meta`); keys keep a fixed order, so the same entries give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from feedbridge import __version__
from feedbridge.models import Entry, iso_utc
from feedbridge.render.meta import FeedMeta, categories, cleaned, description
from feedbridge.render.turns import take_turn

JSON_TYPE = "application/feed+json; charset=utf-8"
JSON_FEED_VERSION = "https://jsonfeed.org/version/1.1"


def render_json(meta: FeedMeta, entries: Sequence[Entry]) -> bytes:
    meta, entries = cleaned(meta, entries)
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
    feed["items"] = [_item(entry) for entry in entries]
    return json.dumps(feed, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _item(entry: Entry) -> dict[str, object]:
    take_turn()
    item: dict[str, object] = {"id": entry.id, "url": entry.link, "title": entry.title}
    # JSON Feed requires content_html or content_text on every item.
    if entry.content_html:
        item["content_html"] = entry.content_html
    else:
        item["content_text"] = entry.summary or entry.title
    if entry.summary:
        item["summary"] = entry.summary
    if entry.thumbnail:
        item["image"] = entry.thumbnail
    if entry.published:
        item["date_published"] = iso_utc(entry.published)
    if entry.updated:
        item["date_modified"] = iso_utc(entry.updated)
    if entry.author:
        author = {"name": entry.author}
        if entry.author_url:
            author["url"] = entry.author_url
        if entry.author_avatar:
            author["avatar"] = entry.author_avatar
        # `author` is deprecated in 1.1 but allowed beside `authors`; JSON Feed 1.0 readers know only it.
        item["authors"] = [author]
        item["author"] = author
    if tags := categories(entry):
        item["tags"] = tags
    if entry.replies is not None:
        item["_feedbridge"] = {"replies": entry.replies}
    return item
