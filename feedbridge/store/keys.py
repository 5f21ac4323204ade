"""Every key of the store and the control store, made one way: its kind, a colon, a digest of its parts.

The kind is what a reader of Redis sees and what the control store bounds separately (`failed`,
`ratelimit`, `source`, ...); the digest keeps request text out of keys and bounds their length whatever
the parts are. Two entries share a key exactly when their kind and parts are equal.

Each kind has one function here, so its parts are chosen in one place: a key that changes shape orphans
every entry stored under the old one (in Redis, for as long as their TTLs run).
"""

from __future__ import annotations

import hashlib
from datetime import datetime

# --- the store: cached copies ----------------------------------------------------------------------------


def feed(spec: str, self_url: str | None, stylesheet_url: str | None) -> str:
    """A rendered feed: its spec's `cache_key()` and the links built from the request (a body links to its
    own URL and stylesheet, so a copy built for one Host or script root is never served to another)."""
    return _key("feed", spec, *((self_url, stylesheet_url) if self_url or stylesheet_url else ()))


def view(spec: str, page: str, self_url: str, script_root: str) -> str:
    """A page made of a feed (`page`: its `.html` view, the front page's preview of it): its spec's
    `cache_key()` and the links built from the request (the URL the page was asked at, the script root its
    links start with), so a copy built for one Host or script root is never served to another."""
    return _key("view", spec, page, self_url, script_root)


def page(url: str) -> str:
    """A list page, by the URL it is read from (which names its forum, list and page)."""
    return _key("page", url)


def categories(base_url: str, parent: int | None = None) -> str:
    """A forum's directory, or with `parent` that category's subcategories."""
    return _key("categories", base_url) if parent is None else _key("categories", base_url, parent)


def site(base_url: str) -> str:
    """How a forum presents itself (`/site/basic-info.json`)."""
    return _key("site", base_url)


def topic(base_url: str, topic_id: int, last_posted_at: datetime | None) -> str:
    """A topic page, by its last activity: a new post gives a new key, so a copy never goes stale."""
    return _key("topic", base_url, topic_id, last_posted_at.isoformat() if last_posted_at else "-")


def post_head(base_url: str, url: str) -> str:
    """A topic's head (`/t/ID.json`), by its URL."""
    return _key("posthead", base_url, url)


def topic_head(base_url: str, topic_id: int) -> str:
    """A topic's head by its canonical URL, `/t/ID.json`, whichever URL it was read from (a list's link to the
    topic for `content=full`, which the forum answers with the same document)."""
    return post_head(base_url, f"{base_url}/t/{topic_id}.json")


def posts_of(base_url: str, topic_id: int) -> str:
    """The posts of one topic read so far, by post id."""
    return _key("postsof", base_url, topic_id)


def post_list(base_url: str, kind: str, poster: str | None, pages: int) -> str:
    """A collection of posts (`/posts`, `/u/USER/posts`), shared by every format and filter of its feeds."""
    return _key("postlist", base_url, kind, poster, pages)


# --- the control store: what steers requests to forums ---------------------------------------------------

FAILED = "failed:"
"""The failure remembered for the entry stored under a key is kept under this and that key (`failed:page:…`):
the entry's key is a kind and a digest already, bounded, so it is not digested again."""



def ratelimit(base_url: str) -> str:
    """Until when a forum asked the bridge to wait (its last 429's Retry-After)."""
    return _key("ratelimit", base_url)


def source(base_url: str) -> str:
    """Which lists (Markdown or JSON) a forum is read through, as its probes decided."""
    return _key("source", base_url)


def handshake(base_url: str) -> str:
    """What a forum's `HEAD /user-api-key/new` said of its User API keys (`feedbridge.feeds.members.handshake`)."""
    return _key("handshake", base_url)


def revoked(base_url: str) -> str:
    """Set in a member's scope once the forum confirmed their key is gone (`feedbridge.feeds.members.personal`)."""
    return _key("revoked", base_url)


def topic_slow(base_url: str) -> str:
    """Set while a forum's topic pages count as slow (a rebuild read them past its deadline)."""
    return _key("topicslow", base_url)


def _key(kind: str, *parts: object) -> str:
    """`kind:` and the first 32 hex digits of SHA-256 over the parts joined by `|`."""
    return f"{kind}:" + hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:32]
