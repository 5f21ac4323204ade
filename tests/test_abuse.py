"""Abusive clients and slow forums against the cache policy (`feedbridge/feeds/admission/policy.py`), over real sockets.

Each test counts what reaches the fake forum, or what the store holds, never how long something took
beyond shapes with huge margins (an answer at all within seconds, where the old code took 100 s or never).

What depends on the server a deployment runs (the budgets and each client's share, cold slots, requests
waiting at once, deadlines and single-flight waits) is tested on the Procfile's gunicorn with its gevent
worker (`procfile_app`), as production runs it; the fake forum stays in this process, reached over
127.0.0.1. Negative caching is the cache policy's alone, the same in either server, and stays on
`running_app`, a thread of this process; so does the flood test, which looks into the store.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import feedparser
import httpx
import pytest

from feedbridge.config import Settings, parse_forum
from tests.appserver import procfile_app, running_app, serving, settings_for
from tests.redis_server import RedisServer, redis_module, redis_server  # noqa: F401
from tests.upstream import FakeForum, read_at, spawn

COMPILER = "/c/compiler/5"


def get(url: str, **kwargs) -> httpx.Response:
    return httpx.get(url, timeout=30, **kwargs)


def client_from(address: str) -> httpx.Client:
    """A client whose connections come from another loopback address: another REMOTE_ADDR for the bridge."""
    return httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address=address))


# --- negative caching ---------------------------------------------------------------------------------

def test_200_requests_for_an_unknown_category_cost_one_upstream_request(upstream):
    with running_app(settings_for(upstream.url)) as app, httpx.Client(timeout=30) as client:
        url = app.feed_url("/c/no-such-category/999.atom")
        responses = [client.get(url) for _ in range(200)]
    assert {r.status_code for r in responses} == {404}
    # core lists nothing at `/latest.md?category=999`; the category's own path says it is missing
    assert upstream.count(read_at("/c/no-such-category/999")) == 1
    assert upstream.count("/c/no-such-category/999.md") == 1
    later = responses[-1]
    assert "answered 404" in later.text and "remembered" in later.text
    assert 1 <= int(later.headers["retry-after"]) <= 30


def test_a_remembered_failure_is_shared_through_redis(upstream, redis_server: RedisServer):  # noqa: F811
    settings = Settings(forums=(parse_forum(upstream.url),), cache_url=redis_server.url)
    upstream.fail("/latest.md", 500)
    with running_app(settings) as one, running_app(settings) as two:
        assert get(one.feed_url("/latest.atom")).status_code == 502
        answer = get(two.feed_url("/latest.rss"))  # another instance, another feed of the same page
    assert answer.status_code == 502 and "answered 500" in answer.text and "remembered" in answer.text
    assert upstream.count("/latest.md") == 1


def test_a_remembered_failure_is_told_once_however_often_it_is_answered(upstream):
    """A feed's build failing on its list's remembered failure remembered that message, note and all, and the
    next answer noted it again: "… (remembered; …) (remembered; …)", in the body and in X-Feedbridge-Stale."""
    upstream.fail("/latest.md", 500, prefix=True)
    with running_app(settings_for(upstream.url)) as app:
        answers = [get(app.feed_url(f"/latest.{fmt}")) for fmt in ("atom", "atom", "rss", "json", "atom")]
    assert {a.status_code for a in answers} == {502}
    assert all(a.text.count("(remembered;") == 1 and "answered 500" in a.text for a in answers[1:]), [
        a.text for a in answers]
    assert upstream.count("/latest.md") == 1


def test_a_remembered_failure_is_not_remembered_again_by_a_feed_built_on_it(upstream):
    """A feed built on its list's remembered failure remembered it again, from then: the forum's one failure was
    answered for nearly twice the negative TTL, and then as a stale copy 'upstream failed' built from a list the
    forum had just served."""
    upstream.fail("/latest.md", 500, times=1)
    # Seconds apart by margins a loaded machine keeps: remembered for 6 s from 0; the RSS feed first at 2 (4 s
    # left), again at 7.5, after the list's failure is forgotten and before the RSS feed's would have been (8).
    with running_app(settings_for(upstream.url, negative_ttl=6)) as app:
        started = time.monotonic()
        assert get(app.feed_url("/latest.atom")).status_code == 502  # the forum's one failure
        time.sleep(max(2 - (time.monotonic() - started), 0))
        assert get(app.feed_url("/latest.rss")).status_code == 502  # remembered, with 4 s left
        time.sleep(max(7.5 - (time.monotonic() - started), 0))
        later = get(app.feed_url("/latest.rss"))  # the list's failure is forgotten: the forum is asked
    assert later.status_code == 200 and later.headers["X-Feedbridge-Cache"] == "miss", later.text


def test_distinct_unknown_categories_are_bounded_by_the_clients_share(upstream):
    with procfile_app(settings_for(upstream.url, forum_budget=30)) as app, httpx.Client(timeout=30) as client:
        # ids no category of the fake forum has (core reads a category by its id)
        statuses = [client.get(app.feed_url(f"/c/nope-{i}/{1000 + i}.atom")).status_code for i in range(1, 201)]
    # a third of 30: each category's empty `/latest.md?category=ID` and its own path's 404, two requests a feed
    # (the first's empty list, a Markdown list, decided the forum's source: no probe of `/latest.md`)
    assert upstream.count() == 10
    assert [r.target for r in upstream.requests].count("/latest.md") == 0
    assert statuses.count(404) == 5 and statuses.count(503) == 195


def test_a_failed_topic_page_is_not_asked_for_again_on_the_next_rebuild(upstream):
    topic = "/t/rfc-polyhedral-optimization-pass-for-pytorch-inductor/3341.md"
    upstream.fail(topic, 500)
    with running_app(settings_for(upstream.url, cache_ttl=0)) as app:
        for _ in range(3):
            assert get(app.feed_url(f"{COMPILER}.json?content=full")).status_code == 200
    assert upstream.count(topic) == 1


# --- the per-forum budget -----------------------------------------------------------------------------

def test_one_client_cannot_spend_the_forums_budget(upstream):
    with procfile_app(settings_for(upstream.url, forum_budget=12)) as app:
        cached = app.feed_url("/latest.atom")
        with client_from("127.0.0.2") as reader:
            assert reader.get(cached).status_code == 200  # warm, by a reader: one upstream request
        asked = upstream.count()
        with client_from("127.0.0.3") as hostile:
            flood = [hostile.get(app.feed_url(f"/latest.atom?category={i}")) for i in range(1, 41)]
            cached_during = hostile.get(cached)
        assert [r.status_code for r in flood[:4]] == [200] * 4  # its share: a third of 12
        refused = flood[4:]
        assert {r.status_code for r in refused} == {503}
        assert "used its share (4)" in refused[0].text
        assert 1 <= int(refused[0].headers["retry-after"]) <= 60
        assert cached_during.status_code == 200 and cached_during.headers["x-feedbridge-cache"] == "hit"
        assert upstream.count() - asked == 4
        with client_from("127.0.0.4") as other:  # another client still gets a cold feed
            cold = other.get(app.feed_url(COMPILER + ".atom"))
        assert cold.status_code == 200 and cold.headers["x-feedbridge-cache"] == "miss"
        assert feedparser.parse(cold.content).bozo == 0
        # Many clients together spend the whole budget, never more.
        for n in range(5, 12):
            with client_from(f"127.0.0.{n}") as client:
                for i in range(6):
                    client.get(app.feed_url(f"/top.atom?period=daily&category={n * 10 + i}"))
        assert upstream.count() <= 12


def test_past_the_budget_a_stale_copy_is_served_instead_of_503(upstream):
    with procfile_app(settings_for(upstream.url, forum_budget=3, cache_ttl=0)) as app:
        url = app.feed_url("/latest.atom")
        good = get(url)
        assert good.status_code == 200  # share: 1 request a minute, now spent
        again = get(url)
        assert again.status_code == 200 and again.content == good.content
        assert again.headers["x-feedbridge-cache"] == "stale"
        assert "used its share" in again.headers["x-feedbridge-stale"]
        cold = get(app.feed_url(COMPILER + ".atom"))
        assert cold.status_code == 503 and "retry-after" in cold.headers
    assert upstream.count() == 1


# --- the copies readers poll survive a flood ----------------------------------------------------------

def test_a_flood_of_distinct_urls_does_not_evict_the_polled_feed(upstream):
    """On `serving`, in this process, not on the Procfile's gunicorn: it counts the entries the store holds
    after the flood (`len(store)`), which only the app's own process can see. From outside, a feed whose copy
    the flood pushed out and one still kept both answer 200 "stale" once the forum fails (the first built
    again from the kept list page), so no answer tells them apart."""
    settings = settings_for(upstream.url, cache_max_bytes=512 * 1024, cache_ttl=1, forum_budget=0, cpu_allowance=0)
    with serving(settings) as (app, flask_app):
        store = flask_app.extensions["feedbridge"].public.store
        polled = app.feed_url(f"{COMPILER}.atom")
        good = get(polled)
        time.sleep(1.1)  # past the cache TTL: the reader's next poll rebuilds it
        assert get(polled).headers["x-feedbridge-cache"] == "miss"
        # Each a whole 30-entry feed of about 19 KiB: six times the cache bound in all.
        flood = [app.feed_url(f"/latest.json?q=-zzz{i}") for i in range(160)]
        local = threading.local()

        def fetch(url: str) -> int:
            local.client = getattr(local, "client", None) or httpx.Client(timeout=30)
            return local.client.get(url).status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(fetch, flood))
        assert statuses == [200] * len(flood)
        assert len(store) < len(flood) // 4  # the flood did overflow the cache: most of it is gone
        upstream.fail("/", 500, prefix=True)
        time.sleep(1.1)  # the polled copy is stale now: the rebuild fails, the last good copy must be there
        stale = get(polled)
    assert stale.status_code == 200 and stale.headers["x-feedbridge-cache"] == "stale"
    assert stale.content[:200] == good.content[:200] and feedparser.parse(stale.content).bozo == 0


# --- one deadline per request -------------------------------------------------------------------------

def test_stalled_topic_pages_answer_within_the_deadline_and_are_not_asked_again(upstream):
    upstream.stall("/t/", 60, prefix=True)
    settings = settings_for(upstream.url, cache_ttl=0, request_deadline=3.0, read_timeout=10.0)
    with procfile_app(settings) as app:
        started = time.monotonic()
        first = get(app.feed_url(f"{COMPILER}.atom?content=full"))
        elapsed = time.monotonic() - started
        topic_requests = upstream.count("/t/", prefix=True)
        second = get(app.feed_url(f"{COMPILER}.atom?content=full"))
        assert upstream.count("/t/", prefix=True) == topic_requests  # the rebuild asked for no topic page
    assert first.status_code == 200 and second.status_code == 200
    assert elapsed < 3.0 + 7.0  # the deadline plus generous slack; the old code took 10 waves x 10 s
    parsed = feedparser.parse(first.content)
    assert parsed.bozo == 0 and len(parsed.entries) == 30  # every entry, with its excerpt
    assert 1 <= topic_requests <= 2 * settings.fetch_concurrency


def test_topic_pages_a_request_stopped_waiting_for_are_kept_for_the_next(upstream):
    """The topic pages under way when a request's deadline passes go on in the pool and keep what they read
    (`Read.stepping`, `pooled`: their fetches are not cut at the deadline): the next build (another format) asks
    the forum only for the pages no one read. Cut at the deadline, each was asked again. No page is marked slow
    (`FEEDBRIDGE_NEGATIVE_TTL=0`), so the next build reads the rest."""
    upstream.stall("/t/", 4.0, prefix=True, times=3)  # the first wave answers after the request's deadline
    settings = settings_for(upstream.url, cache_ttl=0, request_deadline=3.0, read_timeout=10.0, negative_ttl=0)
    with procfile_app(settings) as app:
        first = get(app.feed_url(f"{COMPILER}.atom?content=full"))
        time.sleep(2.5)  # the first wave's pages answer, and are kept
        asked = upstream.count("/t/", prefix=True)
        second = get(app.feed_url(f"{COMPILER}.rss?content=full"))
    assert first.status_code == 200 and second.status_code == 200
    assert 1 <= asked < 30
    assert upstream.count("/t/", prefix=True) == 30  # each topic page asked once, over both builds


def test_a_request_whose_list_spent_its_deadline_marks_no_topic_page_slow_for_everyone(upstream):
    """Only the topic pages' own slowness marks them slow for every reader. A request whose list took most of
    its deadline (a slow list, or a wait for the budget's room) reaches pages that answer in 0.3 s with half a
    second left, which says nothing of them; the next reader (another format, so another build) has its topic
    pages read, not left to their excerpts for the negative TTL (RELIABILITY.md row 60)."""
    upstream.stall(read_at(COMPILER), 7.5, times=1)
    upstream.stall("/t/", 0.3, prefix=True)
    settings = settings_for(upstream.url, cache_ttl=0, request_deadline=8.0, read_timeout=10.0)
    with procfile_app(settings) as app:
        first = get(app.feed_url(f"{COMPILER}.atom?content=full"))
        time.sleep(0.5)  # the first request's topic fetches left under way end (and are kept)
        asked = upstream.count("/t/", prefix=True)
        second = get(app.feed_url(f"{COMPILER}.rss?content=full"))
    assert first.status_code == 200 and second.status_code == 200
    assert 0 < asked < 30  # the first request's deadline passed while it read its topic pages
    assert upstream.count("/t/", prefix=True) >= 30  # the second read the rest
    assert "greedily" in second.text  # only in a first post, not in any excerpt


def test_a_fetch_the_request_waits_on_ends_by_its_deadline_and_is_not_remembered(upstream):
    """A fetch the request waited on itself (its list page) had the whole FEEDBRIDGE_TOTAL_TIMEOUT however late
    it began: a request answered past its deadline (27 s of 25 after a slow list and a basic-info read). It now
    ends by the request's deadline, and is not remembered as the forum's failure: the forum may have been about
    to answer, and the next request, with its whole deadline, asks again."""
    upstream.stall(read_at(COMPILER), 30, times=1)
    settings = settings_for(upstream.url, cache_ttl=0, request_deadline=2.0, read_timeout=20.0, total_timeout=25.0)
    with procfile_app(settings) as app:
        started = time.monotonic()
        first = get(app.feed_url(f"{COMPILER}.atom"))
        elapsed = time.monotonic() - started
        second = get(app.feed_url(f"{COMPILER}.atom"))
    assert first.status_code == 504 and "deadline passed" in first.text, first.text
    assert elapsed < 2.0 + 8.0  # the deadline plus generous slack; before, the read timeout's 20 s
    assert second.status_code == 200 and upstream.count(read_at(COMPILER)) == 2


def test_the_deadline_must_be_below_the_worker_timeout():
    from feedbridge.errors import ConfigError

    with pytest.raises(ConfigError, match="FEEDBRIDGE_REQUEST_DEADLINE .* below FEEDBRIDGE_WORKER_TIMEOUT"):
        Settings.from_env({"FEEDBRIDGE_REQUEST_DEADLINE": "40", "FEEDBRIDGE_WORKER_TIMEOUT": "40"})
    settings = Settings.from_env({"FEEDBRIDGE_REQUEST_DEADLINE": "10", "FEEDBRIDGE_NEGATIVE_TTL": "0",
                                  "FEEDBRIDGE_FORUM_BUDGET": "50", "FEEDBRIDGE_SINGLEFLIGHT_WAIT": "2",
                                  "FEEDBRIDGE_COLD_SLOTS": "2"})
    assert (settings.request_deadline, settings.negative_ttl, settings.forum_budget) == (10.0, 0, 50)
    assert (settings.singleflight_wait, settings.cold_slots) == (2.0, 2)


# --- single-flight waits on pages ---------------------------------------------------------------------

def test_html_view_and_front_page_answer_504_when_a_shared_fetch_is_too_slow(upstream: FakeForum):
    upstream.stall("/latest.md", 3, times=1)
    with procfile_app(settings_for(upstream.url, singleflight_wait=0.3)) as app:
        view = app.feed_url("/latest.html")
        front = f"{app.url}/?forum={app.forum_key}&list=latest"

        def one(url: str) -> httpx.Response:
            return get(url)

        with ThreadPoolExecutor(3) as pool:
            leader = pool.submit(one, view)
            deadline = time.monotonic() + 10
            while not upstream.count("/latest.md") and time.monotonic() < deadline:
                time.sleep(0.02)  # until the leader's fetch has reached the forum (a fixed pause lost the race
                # on a loaded machine): the next two wait on it
            waiter, page = pool.submit(one, view), pool.submit(one, front)
            answers = [leader.result(), waiter.result(), page.result()]
    assert answers[0].status_code == 200
    assert answers[1].status_code == 504
    assert answers[1].headers["content-type"].startswith("text/html")
    assert "waited 0.3s for another request" in answers[1].text
    assert answers[2].status_code == 200 and "waited 0.3s for another request" in answers[2].text


def test_a_feed_keeps_its_cold_slot_after_reading_the_directory():
    """A feed that excludes a category reads the directory in a scope of its own, then its topic pages: the
    slot it took must stay taken until the feed is done, or a slow forum holds more builds than there are
    slots (the directory's scope used to give it back)."""
    # the slots alone: with one slot, a client's builds at once are one too (the allowance, off here)
    with FakeForum(mode="json", json_lists=True) as upstream, \
            procfile_app(settings_for(upstream.url, cold_slots=1, forum_budget=0, request_deadline=4,
                                      cpu_allowance=0)) as app:
        upstream.stall("/t/", 3, prefix=True)  # the topic pages, read after the directory
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(get, app.feed_url("/latest.atom?exclude_category=999&content=full"))
            deadline = time.monotonic() + 10
            while not upstream.count("/t/", prefix=True) and time.monotonic() < deadline:
                time.sleep(0.05)  # the first feed has read the directory and waits on its topic pages
            second = get(app.feed_url("/c/compiler/5.atom"))
            assert first.result().status_code == 200
    assert second.status_code == 503 and "retry" in second.text
    assert upstream.count("/c/compiler/5", prefix=True) == 0


def test_a_slow_forum_holds_half_the_cold_slots_and_another_forums_cold_feeds_are_read():
    """Forum one answers in 8 s; its readers' six cold feeds held every one of the process's four cold slots,
    and forum two's cold feeds got 503 for as long as forum one was slow. With forums more than one, each
    holds half the slots at most (RELIABILITY.md row 67)."""
    with FakeForum() as one, FakeForum() as two:
        # the slots alone: each client's builds at once are the allowance's (tests/test_cpu_fairness.py)
        settings = replace(settings_for(one.url, cold_slots=4, cpu_allowance=0),
                           forums=(parse_forum(one.url), parse_forum(two.url)))
        with procfile_app(settings) as app:
            one.stall("/", 8, prefix=True)
            waiting = [f"/c/slow-{i}/{1000 + i}.atom" for i in range(6)]
            with ThreadPoolExecutor(6) as pool:
                slow = [pool.submit(get, app.feed_url(path)) for path in waiting]
                time.sleep(1.5)  # forum one's readers have taken what slots they may
                other = get(f"{app.url}/{parse_forum(two.url).key}/c/compiler/5.atom")
                refused = [future.result() for future in slow]
    assert other.status_code == 200 and two.count(read_at(COMPILER)) == 1
    assert sum(answer.status_code == 503 for answer in refused) == 4  # two held forum one's half
    assert "(its half)" in next(answer.text for answer in refused if answer.status_code == 503)


def test_readers_waiting_on_a_slow_forums_fetch_take_its_half_of_the_slots_and_another_forum_is_read():
    """Row 67's bound where a request waits on another's fetch with a copy held: such waiters took a process
    slot without the forum's part, so forum one's readers of one stale feed took every slot and forum two's
    cold feeds got 503 (the review of row 67's change). Now the first two hold forum one's half, the next get
    the stale copy at once, and forum two's feed is read."""
    with FakeForum() as one, FakeForum() as two:
        settings = replace(settings_for(one.url, cold_slots=4, cache_ttl=1),
                           forums=(parse_forum(one.url), parse_forum(two.url)))
        with procfile_app(settings) as app:
            polled = app.feed_url(COMPILER + ".atom")
            assert get(polled).status_code == 200
            time.sleep(1.5)  # the copy is stale, and kept
            one.stall(read_at(COMPILER), 6)
            with ThreadPoolExecutor(4) as pool:
                leader = pool.submit(get, polled)
                time.sleep(0.5)  # its fetch of the list is under way
                waiting = [pool.submit(get, polled) for _ in range(3)]
                time.sleep(1)
                answered = [future.done() for future in waiting]
                other = get(f"{app.url}/{parse_forum(two.url).key}{COMPILER}.atom")
                replies = [future.result() for future in waiting]
                assert leader.result().status_code == 200
    assert other.status_code == 200 and two.count(read_at(COMPILER)) == 1
    assert sorted(answered) == [False, True, True], answered  # one waits with forum one's second slot
    stale = [reply for reply, done in zip(replies, answered, strict=True) if done]
    assert all(reply.status_code == 200 and "fetched already" in reply.headers["x-feedbridge-stale"]
               for reply in stale), [reply.headers for reply in stale]
    assert one.count(read_at(COMPILER)) == 2  # the first read and the leader's: the waiters asked nothing


# --- slow forum: hits keep their threads --------------------------------------------------------------

@pytest.mark.timeout(120)
def test_cached_feed_and_healthz_answer_while_32_cold_requests_wait_on_a_slow_forum():
    with spawn() as forum, procfile_app(settings_for(forum.url, cold_slots=6, log_level="WARNING",
                                                     trusted_hops=1, cpu_allowance=0)) as app:
        cached = app.feed_url("/latest.atom")
        assert get(cached).status_code == 200
        # every category list (core's Markdown `/latest.md?category=ID`): long enough for all 32 to arrive
        forum.control.stall("/latest.md?category=", 8, prefix=True)
        cold = [app.feed_url(f"/c/slow-{i}/{1000 + i}.atom") for i in range(1, 33)]  # no category has these ids
        # from two clients (behind the trusted router), as one may hold only two thirds of the slots
        clients = [{"X-Forwarded-For": f"198.51.100.{i % 2 + 1}"} for i in range(len(cold))]
        with ThreadPoolExecutor(34) as pool:
            waiting = [pool.submit(lambda u, h: httpx.get(u, headers=h, timeout=60), u, h)
                       for u, h in zip(cold, clients, strict=True)]
            time.sleep(1.5)  # every cold request has arrived; the admitted ones wait on the forum
            hit = httpx.get(cached, timeout=2)
            health = httpx.get(f"{app.url}/healthz", timeout=2)
            statuses = [f.result().status_code for f in waiting]
    assert hit.status_code == 200 and hit.headers["x-feedbridge-cache"] == "hit"
    assert health.status_code == 200
    # 6 slots (8 threads - 2): those wait on the forum (then 404: no such category); the rest are told to retry.
    assert statuses.count(404) == 6 and statuses.count(503) == 26


@pytest.mark.timeout(120)
def test_one_client_waiting_on_a_slow_forum_leaves_a_third_of_the_cold_slots_to_the_others():
    """One client's cold feeds wait on pages the forum is slow to give, well within its share of the forum's
    budget: they held all six slots, and every other client's cold feed got 503 until the pages came. A client
    holds two thirds of them at most: the others' cold feeds are read meanwhile."""
    with spawn() as forum, procfile_app(settings_for(forum.url, cold_slots=6, log_level="WARNING",
                                                     trusted_hops=1, cpu_allowance=0)) as app:
        forum.control.stall("/latest.md?category=", 8, prefix=True)  # the lists the first client asks for
        hog, other = {"X-Forwarded-For": "198.51.100.7"}, {"X-Forwarded-For": "203.0.113.9"}
        with ThreadPoolExecutor(8) as pool:
            waiting = [pool.submit(httpx.get, app.feed_url(f"/c/slow-{i}/{1000 + i}.atom"), headers=hog, timeout=60)
                       for i in range(6)]
            time.sleep(1.5)  # all six have arrived: four wait on the forum, two were told to retry
            theirs = [httpx.get(app.feed_url(path), headers=other, timeout=30)
                      for path in ("/latest.atom", "/top.atom", "/hot.rss", "/latest.json?q=inductor")]
            hogged = [f.result() for f in waiting]
    assert [r.status_code for r in theirs] == [200, 200, 200, 200], [r.text[:120] for r in theirs]
    assert sorted(r.status_code for r in hogged) == [404] * 4 + [503] * 2
    refused = next(r for r in hogged if r.status_code == 503)
    assert "2 of its 6 slots are kept for other clients" in refused.text and refused.headers["Retry-After"]
