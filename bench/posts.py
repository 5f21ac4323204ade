"""`python -m bench.posts`: a cold topic-posts feed against a cold list feed, a mega topic's against a normal
topic's, and what polling costs the forum.

The feeds are served by the app on a real socket from the fake forum (tests/upstream.py, JSON mode, with
the posts of tests/fake_posts.py): `/t/9446.atom` (the newest 30 of a 446-post topic: its head and one
batch) against `/latest.atom` (one list page), and `/t/9777.atom` (the newest 30 of a 12,000-post mega
topic, served without its stream: its head, the ids of its end and one batch) against `/t/9446.atom`, both
on `PostSite.core()`. Each cold sample is a new app, so nothing is cached; the
figures are medians in milliseconds, and the request counts are the fake forum's log. Polling runs with
a cache TTL of 0, so every poll rebuilds: a quiet topic costs its head, `/t/ID.json`, downloaded whole (the
fake forum answers as core does: no ETag or Last-Modified on a topic, so no 304), a busy one that and a batch
of its new posts; the bytes each poll downloads are counted too.
"""

from __future__ import annotations

import statistics
import time

import httpx

from bench.harness import Context, Row
from feedbridge.feeds.sources.site import PATH as BASIC_INFO
from tests.appserver import running_app, settings_for
from tests.fake_posts import MEGA, MEGA_POSTS, PostSite
from tests.upstream import FakeForum

# BASIC_INFO: the forum's /site/basic-info.json (its icon), read once per forum per stale TTL by the first feed
# of a new app, whatever the feed: the rows count what a topic's posts feed costs, as they did before that read
# existed (4 and 3 requests where the feed's own are 3 and 2, in the run of 2026-12-06).

ROUNDS = 7


def cold(path: str, rounds: int = ROUNDS, site: PostSite | None = None) -> tuple[float, int]:
    """Median ms of a cold request for `path` (on `site`, else the standard one), and the upstream requests it
    cost: the feed's own, not the forum's basic info (`BASIC_INFO`), which a new app reads once per forum."""
    times, counts = [], []
    with FakeForum(mode="json", posts=(site or PostSite.standard()).answer) as forum:
        for _ in range(rounds):
            with running_app(settings_for(forum.url)) as app:
                forum.reset()
                started = time.perf_counter()
                response = httpx.get(app.feed_url(path), timeout=30)
                times.append((time.perf_counter() - started) * 1e3)
                assert response.status_code == 200, response.text[:200]
                counts.append(forum.count() - forum.count(BASIC_INFO))
    return statistics.median(times), max(counts)


def polling() -> dict[str, tuple[int, int]]:
    """Upstream requests and the bytes they downloaded, of the first read, a quiet poll and a busy poll of one
    topic's feed (the bytes by asking the fake forum the same targets again: its answers do not change)."""
    site = PostSite.standard()
    found: dict[str, tuple[int, int]] = {}
    with FakeForum(mode="json", posts=site.answer) as forum, \
            running_app(settings_for(forum.url, cache_ttl=0)) as app:
        for name in ("first read", "quiet poll", "busy poll (1 new post)"):
            if name.startswith("busy"):
                site.reply(9446, "carol")
            forum.reset()
            assert httpx.get(app.feed_url("/t/9446.atom"), timeout=30).status_code == 200
            targets = [r.target for r in forum.requests if r.path != BASIC_INFO]
            found[name] = (len(targets), sum(len(httpx.get(forum.url + t, timeout=30).content) for t in targets))
    return found


def posts_section(ctx: Context) -> list[Row]:
    """Section 8: a topic's posts feed against the list feed, cold, and the requests polling costs the forum."""
    rounds = ctx.loops(ROUNDS, 3)
    posts_ms, posts_requests = cold("/t/9446.atom", rounds)
    list_ms, list_requests = cold("/latest.atom", rounds)
    polls = polling()
    core = PostSite.core()
    mega_ms, mega_requests = cold(f"/t/{MEGA}.atom", rounds, core)
    normal_ms, normal_requests = cold("/t/9446.atom", rounds, core)
    ctx.notes.append(f"8: /t/{MEGA}.atom is the newest 30 of a {MEGA_POSTS:,}-post mega topic ({mega_requests} "
                     f"upstream requests: its head, /t/{MEGA}/post_ids.json?post_number=N and one batch), against "
                     f"/t/9446.atom ({normal_requests}) on the same site (PostSite.core()).")
    ctx.notes.append(f"8: the app on a real socket over the fake forum's JSON mode, a new app per cold sample "
                     f"(median of {rounds}); /t/9446.atom is the newest 30 of a 446-post topic (its head and one "
                     f"post_ids[] batch: {posts_requests} upstream requests with detection), /latest.atom one "
                     f"30-topic list page ({list_requests}); polling with a cache TTL of 0.")
    return [
        Row("8", "cold topic-posts feed (30 newest of 446) vs the list feed, median latency", posts_ms, list_ms, "ms",
            posts_ms / list_ms, "(reference)", None),
        Row("8", f"cold mega topic posts feed (30 newest of {MEGA_POSTS:,}) vs a 446-post topic's, median latency",
            mega_ms, normal_ms, "ms", mega_ms / normal_ms, "(reference)", None),
        Row("8", f"upstream requests of a cold mega topic posts feed ({MEGA_POSTS:,} posts)", float(mega_requests),
            None, "fetches", None, "≤ 3", mega_requests <= 3),
        *(Row("8", f"upstream requests polling a topic's posts feed: {name}", float(count), None, "fetches", None,
              "≤ 2" if name != "quiet poll" else "≤ 1", count <= (1 if name == "quiet poll" else 2))
          for name, (count, _size) in polls.items()),
        *(Row("8", f"bytes those requests downloaded: {name} (no 304 from core)", float(size), None, "bytes", None,
              "(reference)", None) for name, (_count, size) in polls.items()),
    ]


def main() -> None:
    posts_ms, posts_requests = cold("/t/9446.atom")
    list_ms, list_requests = cold("/latest.atom")
    print(f"cold feeds (median of {ROUNDS}, a new app each):")
    print(f"  /t/9446.atom  (30 newest of 446 posts)  {posts_ms:7.1f} ms  {posts_requests} upstream requests")
    print(f"  /latest.atom  (one 30-topic list page)  {list_ms:7.1f} ms  {list_requests} upstream requests")
    core = PostSite.core()
    mega_ms, mega_requests = cold(f"/t/{MEGA}.atom", site=core)
    normal_ms, normal_requests = cold("/t/9446.atom", site=core)
    print(f"  /t/{MEGA}.atom  (30 newest of {MEGA_POSTS:,}, mega)  {mega_ms:7.1f} ms  {mega_requests} requests")
    print(f"  /t/9446.atom  (30 newest of 446, same site)  {normal_ms:7.1f} ms  {normal_requests} requests")
    print("polling /t/9446.atom with a cache TTL of 0:")
    for name, (count, size) in polling().items():
        print(f"  {name:24} {count} upstream requests, {size:,} bytes")


if __name__ == "__main__":
    main()
