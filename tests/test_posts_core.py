"""Post feeds against the shapes of Discourse's real topics (issue 32, items 2-3), over a real socket: a mega
topic (12,000 posts, served without its stream), a closed topic, and topics whose ends hold small actions,
whispers and deleted posts (tests/fake_posts.py `PostSite.core()`, each behaviour naming the core file it
follows).

What is counted is upstream requests (the fake forum's log), never speed: `limit=` counts posts, and what
is no post takes no entry and no slot, within the stated bound of slots read back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from feedbridge.feeds.sources.post_feeds import MAX_SKIPPED, SLACK
from tests.appserver import RunningApp, procfile_web, running_app, settings_for
from tests.fake_posts import BOT, CLOSED, MEGA, MEGA_POSTS, MIXED, SMALL_ACTION, WHISPER, WITHDRAWN, PostSite
from tests.test_posts import entries, post_of
from tests.upstream import FakeForum, list_reads

Served = tuple[PostSite, FakeForum, RunningApp]


@pytest.fixture
def served() -> Iterator[Served]:
    """The core-shaped site, and an app of its own (nothing cached from another test)."""
    site = PostSite.core()
    with FakeForum(mode="json", posts=site.answer) as forum, running_app(settings_for(forum.url)) as app:
        yield site, forum, app


@pytest.fixture
def polled() -> Iterator[Served]:
    """The same with a cache TTL of 0: every request rebuilds its feed, as a poll after the TTL does."""
    site = PostSite.core()
    with FakeForum(mode="json", posts=site.answer) as forum, \
            running_app(settings_for(forum.url, cache_ttl=0)) as app:
        yield site, forum, app


def numbers(app: RunningApp, path: str, fmt: str = "json") -> list[int]:
    response = httpx.get(app.feed_url(path), timeout=30)
    assert response.status_code == 200, response.text[:300]
    return [post_of(e["id"])[1] for e in entries(response.content, fmt)]


def real_posts(site: PostSite, topic_id: int) -> list[int]:
    """The post numbers a feed may show, newest first: what people wrote and anyone can read."""
    return [p.post_number for p in reversed(site.topics[topic_id].posts)
            if p.post_type not in (SMALL_ACTION, WHISPER) and p.deleted_at is None and not p.hidden
            and not p.user_deleted]


def batches(forum: FakeForum) -> list[list[str]]:
    """The post ids of each `/t/ID/posts.json?post_ids[]=…` the forum was asked for, in order."""
    return [parse_qs(urlsplit(r.target).query)["post_ids[]"] for r in forum.requests
            if urlsplit(r.target).path.endswith("/posts.json")]


# --- mega topics --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["atom", "rss", "json"])
def test_a_12000_post_mega_topic_gives_its_newest_posts_for_three_requests(served: Served, fmt: str) -> None:
    site, forum, app = served
    head = json.loads(site.answer(f"/t/{MEGA}.json") or b"")
    assert head["post_stream"]["isMegaTopic"] is True and "stream" not in head["post_stream"]
    found = numbers(app, f"/t/{MEGA}.{fmt}", fmt)
    assert found == real_posts(site, MEGA)[:30]
    assert found[:3] == [11_999, 11_997, 11_995]  # 12,000 closes it, 11,998 is deleted, 11,996 a whisper
    targets = [r.target for r in list_reads(forum.requests)]
    # Its head, the ids after post 12,000 - (30 + SLACK), and one batch of them: whatever the topic's length.
    assert targets[:2] == [f"/t/{MEGA}.json", f"/t/{MEGA}/post_ids.json?post_number={MEGA_POSTS - 30 - SLACK}"]
    assert len(targets) == 3 and len(batches(forum)) == 1


def test_a_mega_topic_polled_costs_its_head_when_quiet_and_three_requests_when_busy(polled: Served) -> None:
    site, forum, app = polled
    assert numbers(app, f"/t/{MEGA}.atom", "atom")
    forum.reset()
    assert numbers(app, f"/t/{MEGA}.atom", "atom")
    # Quiet: the head alone, read whole (core sends no validators: there is nothing to revalidate with).
    assert [r.target for r in forum.requests] == [f"/t/{MEGA}.json"]
    assert "if-none-match" not in forum.requests[0].headers
    new = site.reply(MEGA, "carol", "<p>Build 12,001 is red.</p>")
    forum.reset()
    found = numbers(app, f"/t/{MEGA}.json")
    assert found[0] == new.post_number == MEGA_POSTS + 1
    targets = [r.target for r in forum.requests]
    assert targets[0] == f"/t/{MEGA}.json" and targets[1].startswith(f"/t/{MEGA}/post_ids.json?post_number=")
    assert len(targets) == 3 and batches(forum) == [[str(new.id)]]  # only the new post's body is read


def test_a_deeper_limit_on_a_mega_topic_asks_for_more_ids_once_and_only_the_posts_not_read(served: Served) -> None:
    site, forum, app = served
    assert numbers(app, f"/t/{MEGA}.json?limit=10") == real_posts(site, MEGA)[:10]
    first = len(batches(forum))
    forum.reset()
    assert numbers(app, f"/t/{MEGA}.json?limit=120") == real_posts(site, MEGA)[:120]
    asked = [r.target for r in forum.requests if "/post_ids.json" in r.target]
    assert asked == [f"/t/{MEGA}/post_ids.json?post_number={MEGA_POSTS - 120 - SLACK}"]
    read = {i for batch in batches(forum) for i in batch}
    # The posts numbered past 11,875 that are not past 11,985 (11,998, deleted, is in neither).
    assert len(read) == (120 + SLACK) - (10 + SLACK)
    assert first == 1 and forum.count(f"/t/{MEGA}.json") == 0  # the head was fresh


def test_a_mega_topic_whose_end_cannot_be_read_answers_its_last_good_copy(polled: Served) -> None:
    site, forum, app = polled
    before = numbers(app, f"/t/{MEGA}.atom", "atom")
    site.reply(MEGA, "carol", "<p>Build 12,001 is red.</p>")  # a new lastId: the end must be asked for again
    forum.fail(f"/t/{MEGA}/post_ids.json", 500, prefix=True)
    forum.reset()
    response = httpx.get(app.feed_url(f"/t/{MEGA}.atom"), timeout=30)
    assert response.status_code == 200 and response.headers["X-Feedbridge-Cache"] == "stale"
    assert [post_of(e["id"])[1] for e in entries(response.content, "atom")] == before
    assert forum.count(f"/t/{MEGA}/post_ids.json", prefix=True) == 1


@pytest.mark.timeout(120)
def test_a_mega_topic_read_under_the_procfiles_gunicorn_spends_the_clients_share_and_no_more() -> None:
    site = PostSite.core()
    with FakeForum(mode="json", posts=site.answer) as forum:
        # One worker: the budget is not split between processes, so a client's share is 15 / 3 = 5.
        env = {"FEEDBRIDGE_FORUMS": forum.url, "FEEDBRIDGE_FORUM_BUDGET": "15", "WEB_CONCURRENCY": "1",
               "FEEDBRIDGE_LOG_LEVEL": "WARNING"}
        with procfile_web(env) as (url, _):
            key = forum.url.removeprefix("http://")
            response = httpx.get(f"{url}/{key}/t/{MEGA}.json", timeout=30)
            assert response.status_code == 200, response.text[:300]
            found = [post_of(e["id"])[1] for e in entries(response.content, "json")]
            # its head, the ids of its end and one batch, and the forum's basic info (its icon): 4 of the share
            assert found == real_posts(site, MEGA)[:30] and len(list_reads(forum.requests)) == 3
            assert forum.count() == 4
            # The newest 500: its head (fresh), the ids of a deeper end and 11 batches, past a client's share of 5.
            forum.reset()
            deep = httpx.get(f"{url}/{key}/t/{MEGA}.json?limit=500", timeout=30)
            assert deep.status_code == 503 and "Retry-After" in deep.headers
            assert len(deep.text.strip().splitlines()) == 1
            assert forum.count() == 5 - 4


def test_a_short_topic_served_as_a_mega_one_gives_every_post_its_first_from_the_head(served: Served) -> None:
    site, forum, app = served
    head = json.loads(site.answer("/t/9003.json") or b"")
    del head["post_stream"]["stream"]
    head["post_stream"].update(isMegaTopic=True, lastId=site.topics[9003].posts[-1].id)
    forum.set_body("/t/9003.json", json.dumps(head))
    assert numbers(app, "/t/9003.json") == [5, 4, 3, 2, 1]
    # Post 1 is on the head's first page and post_ids comes after it; posts 2-5 are on that page too.
    assert [r.target for r in list_reads(forum.requests)] == ["/t/9003.json", "/t/9003/post_ids.json?post_number=1"]


@pytest.mark.parametrize(("name", "body"), [
    ("no lastId", {"id": MEGA, "highest_post_number": 12_000, "post_stream": {"posts": [], "isMegaTopic": True}}),
    ("no highest post number", {"id": MEGA, "post_stream": {"posts": [], "isMegaTopic": True, "lastId": 7}}),
    ("a string lastId", {"id": MEGA, "highest_post_number": 9, "post_stream": {"isMegaTopic": True, "lastId": "7"}}),
])
def test_a_mega_head_without_what_its_end_is_read_by_is_a_clear_502(served: Served, name: str, body: object) -> None:
    _, forum, app = served
    forum.set_body(f"/t/{MEGA}.json", json.dumps(body))
    response = httpx.get(app.feed_url(f"/t/{MEGA}.atom"), timeout=30)
    assert response.status_code == 502 and "lastId or highest_post_number" in response.text, name
    assert len(response.text.strip().splitlines()) == 1


@pytest.mark.parametrize("body", ['{"post_ids": "all"}', '{"post_ids": [1, "2"]}', '{"errors": ["nope"]}', "[]"])
def test_hostile_post_ids_of_a_mega_topic_are_a_clear_502(served: Served, body: str) -> None:
    _, forum, app = served
    forum.set_body(f"/t/{MEGA}/post_ids.json", body)
    response = httpx.get(app.feed_url(f"/t/{MEGA}.atom"), timeout=30)
    assert response.status_code == 502 and "post_ids.json" in response.text
    assert len(response.text.strip().splitlines()) == 1


# --- small actions, whispers: limit= counts posts -------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["atom", "json"])
def test_a_closed_topics_limit_1_holds_its_last_real_post(served: Served, fmt: str) -> None:
    site, forum, app = served
    assert site.topics[CLOSED].posts[-1].action_code == "closed.enabled"
    assert numbers(app, f"/t/{CLOSED}.{fmt}?limit=1", fmt) == [8]
    assert len(list_reads(forum.requests)) == 1  # 9 slots: all on the head's first page


def test_small_actions_and_whispers_never_appear_and_never_take_a_slot(served: Served) -> None:
    site, forum, app = served
    assert numbers(app, f"/t/{MIXED}.json?limit=3") == [25, 22, 20]  # past 27, 26, 24, 23 and 21
    response = httpx.get(app.feed_url(f"/t/{MIXED}.json?limit=30"), timeout=30)
    found = [post_of(e["id"])[1] for e in entries(response.content, "json")]
    assert found == real_posts(site, MIXED) and len(found) == 22
    assert b"secretword" not in response.content and b"closed.enabled" not in response.content
    filtered = numbers(app, f"/t/{MIXED}.json?author=bob&limit=2")
    assert filtered == [p for p in real_posts(site, MIXED) if site.topics[MIXED].posts[p - 1].username == "bob"][:2]


def test_the_newest_20_posts_of_a_446_post_topic_are_20_posts_for_two_requests(served: Served) -> None:
    site, forum, app = served
    found = numbers(app, "/t/9446.atom?limit=20", "atom")
    # Past 442 (deleted), 441 (withdrawn) and 440 (hidden); 445 was moved in with its old date, so it is last.
    assert sorted(found, reverse=True) == real_posts(site, 9446)[:20] and found[-1] == 445
    assert [r.target for r in list_reads(forum.requests)][0] == "/t/9446.json"
    assert [len(b) for b in batches(forum)] == [20 + SLACK] and len(list_reads(forum.requests)) == 2


def test_reading_back_past_what_is_no_post_stops_at_the_stated_bound(served: Served) -> None:
    site, forum, app = served
    assert len(site.topics[BOT].posts) == 155  # 5 posts, then 150 small actions
    assert numbers(app, f"/t/{BOT}.json?limit=1") == []
    looked = [len(b) for b in batches(forum)]
    # Rounds of 1 + SLACK slots, then a batch, then what is left of 1 + MAX_SKIPPED: the head and three batches.
    assert looked == [1 + SLACK, 50, 1 + MAX_SKIPPED - (1 + SLACK) - 50] and len(list_reads(forum.requests)) == 4
    # With room for them, the five posts are found past the 150 small actions.
    assert numbers(app, f"/t/{BOT}.json?limit=100") == [5, 4, 3, 2, 1]


# --- what becomes no post after it was read -------------------------------------------------------------------

def test_a_post_hidden_or_withdrawn_after_it_was_read_leaves_the_topic_feed(polled: Served) -> None:
    """A post read once stood in the topic's feed with its old text after the forum hid it (flags) or its author
    withdrew it, until the topic TTL (7 days) ended: the topic's head, read again, says so (`hidden`,
    `user_deleted`, core's placeholder as its text), and was not believed. Shown again once the forum shows it."""
    site, _forum, app = polled
    small = site.topics[9003]
    assert numbers(app, "/t/9003.json") == [5, 4, 3, 2, 1]
    small.posts[2].hidden = True  # core: Post#hide!
    small.posts[3].user_deleted, small.posts[3].cooked = True, WITHDRAWN  # core: PostDestroyer#mark_for_deletion
    response = httpx.get(app.feed_url("/t/9003.json"), timeout=30)
    assert [post_of(e["id"])[1] for e in entries(response.content, "json")] == [5, 2, 1]
    assert "Small thread post 3" not in response.text and "Small thread post 4" not in response.text
    small.posts[2].hidden = False  # core: Post#unhide!
    assert numbers(app, "/t/9003.json") == [5, 3, 2, 1]


def test_a_reply_its_author_withdrew_leaves_their_content_full_posts_feed() -> None:
    """core lists a withdrawn reply among its author's actions (`UserAction.stream`) until the deletion job runs,
    its placeholder for an excerpt; with `content=full` the topic is read, says the post is none, and the
    entry went on with the placeholder as its text."""
    site = PostSite.standard()
    small = site.topics[9003]
    small.posts[3].user_deleted, small.posts[3].cooked = True, WITHDRAWN  # bob's reply, post 4
    with FakeForum(mode="json", posts=site.answer) as forum, running_app(settings_for(forum.url)) as app:
        response = httpx.get(app.feed_url("/u/bob/posts.json?content=full&limit=100"), timeout=30)
    assert response.status_code == 200, response.text[:300]
    shown = [post_of(e["id"]) for e in entries(response.content, "json")]
    assert (9003, 1) in shown and (9003, 4) not in shown
    assert "withdrawn" not in response.text


def test_a_first_post_hidden_by_flags_gives_content_full_no_text() -> None:
    """core sends anonymous readers a hidden post's placeholder (`cooked_hidden`): it was taken as the topic's
    first post for `content=full`, the text every entry of the topic then showed."""
    from feedbridge.discourse.posts import parse_topic_head

    site = PostSite.standard()
    site.topics[9003].posts[0].hidden = True
    head = parse_topic_head(json.dumps(site.topic_view(site.topics[9003])))
    assert head.first_post_html is None
    site.topics[9003].posts[0].hidden = False
    assert "Small thread post 1" in (parse_topic_head(json.dumps(site.topic_view(site.topics[9003]))).first_post_html or "")


def test_an_emoji_in_an_excerpt_is_its_name_not_nothing() -> None:
    """core's excerpts keep an emoji as its image (`PrettyText.excerpt`, `keep_emoji_images`): the text of the
    excerpt dropped it with every other tag."""
    from feedbridge.discourse.fields import html_text

    emoji = '<img src="/images/emoji/twitter/tada.png?v=12" title=":tada:" class="emoji" alt=":tada:" width="20">'
    assert html_text(f"Shipped it {emoji} thanks all") == "Shipped it :tada: thanks all"
    assert html_text('A <img src="/uploads/x.png" alt="a diagram"> picture') == "A picture"
