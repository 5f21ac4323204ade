"""One admission per request, and no build made without its pages is stored for everyone (issues 31 and 33).

Both over a real socket, on the Procfile's gunicorn with its gevent worker, against the fake forum:

- Issue 31, item 1: a client that has spent its share of the forum's budget asks for `content=full` over a
  cached list. Before, each topic page was refused (`BridgeBusy`), the feed was built anyway from what
  remained, and that copy was stored as the fresh one: the next client got `X-Feedbridge-Cache: hit` with
  no first post at all. Now a build any of whose reads a share, the budget or a slot refused is never
  stored (`feedbridge.feeds.admission.policy.Building.refused`): the starved client gets 503 + Retry-After, and the next one
  builds the whole feed.
- Issue 33, item 1: with one cold slot held by a request waiting on a slow page, a `content=full` feed over
  a cached list sent its topic-page requests to the forum at once from the pool, holding no slot, and
  answered 200. Now the pool's reads are the request's own (`Admission`): they take its slot or are refused.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Iterator

import feedparser
import httpx
import pytest

from tests.appserver import procfile_web, running_app, settings_for
from tests.upstream import DEFAULT_ROOT, FakeForum

CATEGORY = "/c/compiler/5"


def env(forum: FakeForum, **extra: str) -> dict[str, str]:
    return {"FEEDBRIDGE_FORUMS": f"markdown:{forum.url}", "WEB_CONCURRENCY": "1", "FEEDBRIDGE_TRUSTED_HOPS": "1",
            "FEEDBRIDGE_LOG_LEVEL": "WARNING", "FEEDBRIDGE_NEGATIVE_TTL": "0", **extra}


def as_client(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


def with_content(response: httpx.Response) -> int:
    """Entries that carry their first post (`content=full` read the topic's page), rather than the excerpt."""
    return sum(1 for entry in feedparser.parse(response.content).entries if entry.get("content"))


@pytest.fixture
def forum() -> Iterator[FakeForum]:
    with FakeForum() as made:
        yield made


def test_a_feed_built_without_the_pages_a_clients_share_refused_is_never_served_to_another(
        forum: FakeForum) -> None:
    with procfile_web(env(forum, FEEDBRIDGE_FORUM_BUDGET="36", FEEDBRIDGE_TOPIC_BUDGET="10")) as (url, _):
        base = f"{url}/{forum.url.removeprefix('http://')}"
        # The list is cached by an excerpt feed, as a popular category's is.
        assert httpx.get(f"{base}{CATEGORY}.atom", headers=as_client("10.0.0.9"), timeout=30).status_code == 200
        # The attacker spends its share (a third of 36) on cheap distinct misses.
        spent = [httpx.get(f"{base}/c/nothing-{n}/{900 + n}.atom", headers=as_client("10.0.0.1"), timeout=30)
                 for n in range(14)]
        assert [r.status_code for r in spent].count(503) >= 2  # its share is gone: it is refused now
        forum.reset()
        starved = httpx.get(f"{base}{CATEGORY}.atom?content=full", headers=as_client("10.0.0.1"), timeout=30)
        if starved.status_code == 503:  # nothing to fall back on
            assert starved.headers.get("Retry-After") and "share" in starved.text
        else:  # what its cached pages give, marked as the stale copy it is, and stored for nobody
            assert starved.status_code == 200 and starved.headers["X-Feedbridge-Cache"] == "stale", starved.headers
            assert "share" in starved.headers["X-Feedbridge-Stale"] and with_content(starved) == 0
        assert not [r for r in forum.requests if r.path.startswith("/t/")]  # refused before anything was sent
        # Another client asking for the same URL gets the whole feed, built for it now, not a poisoned hit.
        other = httpx.get(f"{base}{CATEGORY}.atom?content=full", headers=as_client("10.0.0.2"), timeout=30)
        assert other.status_code == 200 and other.headers["X-Feedbridge-Cache"] == "miss"
        pages = {r.path for r in forum.requests if r.path.startswith("/t/")}
        served = {path for path in pages if (DEFAULT_ROOT / path.lstrip("/")).is_file()}
        assert len(pages) == 10 and with_content(other) == len(served) >= 3  # every topic page the forum has
        again = httpx.get(f"{base}{CATEGORY}.atom?content=full", headers=as_client("10.0.0.3"), timeout=30)
        assert again.headers["X-Feedbridge-Cache"] == "hit" and with_content(again) == with_content(other)


def test_a_requests_pooled_reads_take_its_slot_or_send_nothing(forum: FakeForum) -> None:
    # Generous budgets (tests/appserver.py GENEROUS_BUDGETS): what is checked is the one cold slot; at the
    # default 10 s budget the last feed's 30 topic pages, past its client's share, waited 20 s for the window.
    # The allowance off: with one slot, one client's builds at once are one too (tests/test_cpu_fairness.py).
    with procfile_web(env(forum, FEEDBRIDGE_COLD_SLOTS="1", FEEDBRIDGE_FORUM_BUDGET_10S="1000",
                          FEEDBRIDGE_FORUM_BUDGET="3000", FEEDBRIDGE_CPU_ALLOWANCE="0")) as (url, _):
        base = f"{url}/{forum.url.removeprefix('http://')}"
        assert httpx.get(f"{base}{CATEGORY}.atom", timeout=30).status_code == 200  # the list, cached
        forum.stall("/latest.md", 4.0)
        forum.reset()  # the category's own list is read at /latest.md too (?category=5): count the holder's alone
        holder = threading.Thread(target=lambda: httpx.get(f"{base}/latest.atom", timeout=30))
        holder.start()
        deadline = time.monotonic() + 10
        while forum.count("/latest.md") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # the holder's fetch has reached the forum: it holds the one slot
        forum.reset()
        busy = httpx.get(f"{base}{CATEGORY}.atom?content=full", timeout=30)
        sent = [r.path for r in forum.requests if r.path.startswith("/t/")]
        holder.join()
        assert (busy.status_code == 503 and busy.headers.get("Retry-After")) or (
            busy.headers.get("X-Feedbridge-Cache") == "stale" and with_content(busy) == 0), busy.headers
        assert sent == []  # before: the topic pages went upstream from the pool, holding no slot
        # Once the slot is free, the same feed is built, its topic pages read under the request's slot.
        assert with_content(httpx.get(f"{base}{CATEGORY}.atom?content=full", timeout=30)) >= 3


def test_a_build_waiting_for_its_clients_share_holds_no_slot(forum: FakeForum) -> None:
    """Issue 43 item 9. A cold `content=full` feed of a list and 20 topic pages is past its client's third of
    the forum's 10 s window (13): its build waits for the window's room, within its deadline, instead of
    being refused its 14th page (before, it was answered with what it had, stale or 503). Meanwhile it
    holds nothing another client needs: with one cold slot, another client's cold feed is built while it
    waits (it gave its attempt up, and its slot back), and then it finishes whole."""
    with procfile_web(env(forum, FEEDBRIDGE_COLD_SLOTS="1", FEEDBRIDGE_TOPIC_BUDGET="20")) as (url, _):
        base = f"{url}/{forum.url.removeprefix('http://')}"
        done: list[httpx.Response] = []
        waiting = threading.Thread(target=lambda: done.append(httpx.get(
            f"{base}{CATEGORY}.atom?content=full", headers=as_client("10.0.0.1"), timeout=60)))
        waiting.start()
        deadline = time.monotonic() + 10
        while len(forum.requests) < 13 and time.monotonic() < deadline:
            time.sleep(0.05)  # the build has spent its client's third of the 10 s window
        time.sleep(0.5)
        other = httpx.get(f"{base}/latest.atom?category=77", headers=as_client("10.0.0.2"), timeout=30)
        still_waiting = waiting.is_alive()
        waiting.join()
    assert other.status_code == 200 and other.headers["X-Feedbridge-Cache"] == "miss", other.text[:200]
    assert still_waiting  # answered while the build waited
    full = done[0]
    assert full.status_code == 200 and full.headers["X-Feedbridge-Cache"] == "miss", (full.headers, full.text[:200])
    pages = {r.path for r in forum.requests if r.path.startswith("/t/")}
    served = {path for path in pages if (DEFAULT_ROOT / path.lstrip("/")).is_file()}
    assert len(pages) == 20 and with_content(full) == len(served) >= 3


def test_an_html_view_made_of_the_last_good_pages_is_shown_and_never_kept(forum: FakeForum) -> None:
    """A view built while the forum fails (from the pages held) was kept as fresh for a cache TTL: the
    forum, back, was not asked again. Now it is shown to that request only."""
    with running_app(settings_for(forum.url, cache_ttl=1, negative_ttl=0, retries=0)) as app:
        assert httpx.get(app.feed_url("/latest.atom"), timeout=30).status_code == 200  # pages held
        time.sleep(1.2)
        forum.fail("/latest.md", 500)
        shown = httpx.get(app.feed_url("/latest.html"), timeout=30)
        assert shown.status_code == 200 and "TorchDynamo and custom ops" in shown.text  # the last good pages
        forum.clear()
        asked = forum.count("/latest.md")
        assert httpx.get(app.feed_url("/latest.html"), timeout=30).status_code == 200
        assert forum.count("/latest.md") == asked + 1  # rebuilt from the forum, not the kept stale page


def test_a_post_feeds_html_view_is_titled_by_its_topic() -> None:
    from tests.fake_posts import PostSite

    site = PostSite.standard()
    with FakeForum(mode="json", posts=site.answer) as forum, running_app(settings_for(forum.url)) as app:
        page = httpx.get(app.feed_url("/t/9446.html"), timeout=30)
        atom = feedparser.parse(httpx.get(app.feed_url("/t/9446.atom"), timeout=30).content)
    assert page.status_code == 200 and "posts of topic" not in atom.feed.title
    assert f"<h1>{html.escape(atom.feed.title, quote=False)}</h1>" in page.text
