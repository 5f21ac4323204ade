"""Digests and pinned topics (issue #32 item 7): where the pages read end is read from the list's order, so an
old pinned topic at the top of page 0 never passes for the end, and the period truly cut off is left out
rather than shown as a closed period missing topics. Pure: listings built here, through `digested`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from msgspec.structs import replace

from feedbridge.config import Settings, parse_forum
from feedbridge.feeds.request.spec import FeedSpec, parse_feed_request
from feedbridge.feeds.select.digest import digested
from feedbridge.models import Entry, Listing, Topic

FORUM = "https://forum.example.org"
SETTINGS = Settings(forums=(parse_forum(FORUM),))
DAY = datetime(2026, 11, 20, tzinfo=UTC)


def spec(path: str = "c/general/1.json", query: str = "digest=daily&limit=50") -> FeedSpec:
    args: dict[str, list[str]] = {}
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        args.setdefault(key, []).append(value)
    return parse_feed_request(SETTINGS, f"forum.example.org/{path}", args)


def topic(topic_id: int, when: datetime, pinned: bool | None = None) -> Topic:
    return Topic(topic_id, f"Topic {topic_id}", f"{FORUM}/t/t/{topic_id}", author="ann", replies=1,
                 last_posted_at=when, pinned=pinned)


def welcome(pinned: bool | None) -> Topic:
    """The old welcome topic a category lists first (core: lib/topic_query.rb#prioritize_pinned_topics)."""
    return topic(7, datetime(2020, 1, 1, 9, tzinfo=UTC), pinned)


def day_of(entry: Entry) -> str:
    return entry.title.split(":")[0]


def count_of(entry: Entry) -> int:
    return int(entry.title.split(": ")[1].split()[0])


# Three days, newest first: 4 topics on the 20th, 4 on the 19th, and the pages end on the 18th, which
# holds one topic here but more further on (the list goes on).
TOPICS = [topic(100 + i, DAY + timedelta(hours=20 - i)) for i in range(4)]
TOPICS += [topic(200 + i, DAY - timedelta(hours=4 + i)) for i in range(4)]
TOPICS += [topic(300, DAY - timedelta(days=1, hours=3))]


def listing(topics: list[Topic], more: bool, page: int = 0) -> Listing:
    return Listing("general", FORUM, "json", tuple(topics), url=f"{FORUM}/c/general/1.json?page={page}",
                   page=page, next_page_url=f"{FORUM}/c/general/1.json?page={page + 1}" if more else None)


@pytest.mark.parametrize("pinned", [True, None], ids=["json-pinned-flag", "markdown-no-flag"])
def test_an_old_pinned_topic_first_does_not_hide_the_cut_off_day(pinned):
    listed = [welcome(pinned), *TOPICS]
    entries = digested(spec(), [listing(listed, more=True)], listed)
    # Before: the pinned 2020 topic was the list's oldest, so its day was left out and 2026-11-18 was shown
    # as a closed day of 1 topic, though the list goes on into it. Now the pages end on the 18th: it goes,
    # and so does every older day (2020-01-01 holds only what sits at the top, not where the list ends).
    assert [day_of(e) for e in entries] == ["2026-11-20", "2026-11-19"]
    assert [count_of(e) for e in entries] == [4, 4]


def test_a_cut_off_period_is_left_out_across_pages():
    first, second = [welcome(True), *TOPICS[:6]], TOPICS[6:]
    entries = digested(spec(query="digest=daily&limit=50&pages=2"),
                       [listing(first, more=True), listing(second, more=True, page=1)], first + second)
    assert [day_of(e) for e in entries] == ["2026-11-20", "2026-11-19"]


def test_every_period_of_a_whole_list_is_shown_pinned_topic_included():
    listed = [welcome(True), *TOPICS]
    entries = digested(spec(), [listing(listed, more=False)], listed)
    assert [day_of(e) for e in entries] == ["2026-11-20", "2026-11-19", "2026-11-18", "2020-01-01"]
    assert [count_of(e) for e in entries] == [4, 4, 1, 1]


def test_a_list_that_ends_in_its_only_period_keeps_it():
    today = TOPICS[:4]
    entries = digested(spec(), [listing(today, more=True)], today)
    assert [(day_of(e), count_of(e)) for e in entries] == [("2026-11-20", 4)]


def test_a_weekly_digest_cuts_at_the_week_the_pages_end_in():
    weeks = [topic(400 + i, DAY - timedelta(weeks=i)) for i in range(4)]  # a Friday in each of 4 weeks
    listed = [welcome(None), *weeks]
    entries = digested(spec(query="digest=weekly&limit=50"), [listing(listed, more=True)], listed)
    assert [day_of(e) for e in entries] == ["2026-W47", "2026-W46", "2026-W45"]


def test_a_list_in_another_order_leaves_out_only_its_oldest_period():
    """A top list is ordered by score: its last topic is no end of anything. Only its oldest period (the
    pinned topic left out of that reckoning) goes, as before."""
    listed = [welcome(True), TOPICS[6], TOPICS[0], TOPICS[8], TOPICS[4]]  # not by activity
    entries = digested(spec("top.json", "period=all&digest=daily&limit=50"), [listing(listed, more=True)], listed)
    assert [day_of(e) for e in entries] == ["2026-11-20", "2026-11-19"]


def test_filtered_out_pinned_topics_still_mark_nothing():
    listed = [welcome(True), *TOPICS]
    kept = [t for t in listed if not t.pinned]
    entries = digested(spec(query="digest=daily&limit=50&exclude_pinned=1"), [listing(listed, more=True)], kept)
    assert [day_of(e) for e in entries] == ["2026-11-20", "2026-11-19"]
    assert all("/t/t/7" not in (e.content_html or "") for e in entries)


def test_a_closed_day_loses_a_topic_that_is_active_again_and_keeps_its_id():
    """What docs/feeds.md says a closed period's entry does when one of its topics gets a new post."""
    listed = [welcome(True), *TOPICS]
    before = {e.id: e for e in digested(spec(), [listing(listed, more=False)], listed)}
    revived = replace(TOPICS[4], last_posted_at=DAY + timedelta(hours=22))
    again = [welcome(True), revived, *TOPICS[:4], *TOPICS[5:]]
    after = {e.id: e for e in digested(spec(), [listing(again, more=False)], again)}
    assert after.keys() == before.keys()
    day_19 = next(key for key in before if key.endswith("/digest/2026-11-19"))
    day_20 = next(key for key in before if key.endswith("/digest/2026-11-20"))
    assert (count_of(before[day_19]), count_of(after[day_19])) == (4, 3)
    assert (count_of(before[day_20]), count_of(after[day_20])) == (4, 5)
    assert "/t/t/200" in (after[day_20].content_html or "") and "/t/t/200" not in (after[day_19].content_html or "")
    untouched = next(key for key in before if key.endswith("/digest/2026-11-18"))
    assert after[untouched] == before[untouched]


@pytest.mark.parametrize("path", ["tag/hot.json", "tag/top.json", "c/top/3.json"])
def test_a_tag_or_category_named_top_or_hot_is_still_in_activity_order(path):
    listed = [welcome(None), *TOPICS]
    entries = digested(spec(path), [listing(listed, more=True)], listed)
    assert [day_of(e) for e in entries] == ["2026-11-20", "2026-11-19"]


def test_a_topic_dated_past_the_build_is_in_no_period():
    """A topic dated 9999 (a hostile forum, a broken clock) made a period that had not begun, forever the newest,
    and took one of `limit=`'s periods from the real ones; it dates no feed, and now is in no period either."""
    now = DAY + timedelta(hours=22)
    future = [topic(900, datetime(9999, 12, 31, tzinfo=UTC)), topic(901, now + timedelta(days=3))]
    days = [day_of(e) for e in digested(spec(query="digest=daily&limit=2"), [listing(future + TOPICS, more=False)],
                                        future + TOPICS, now=now)]
    assert days == [(DAY).date().isoformat(), (DAY - timedelta(days=1)).date().isoformat()]
    near = [topic(902, now + timedelta(minutes=2))]  # within the clock skew between machines: believed
    assert day_of(digested(spec(), [listing(near + TOPICS, more=False)], near + TOPICS, now=now)[0]) == \
        now.date().isoformat()


# --- where core's order and the last post part: a JSON list carries both (lib/post_creator.rb update_topic_stats) ---

def bumped(topic_id: int, posted: datetime, bumped_at: datetime) -> Topic:
    return replace(topic(topic_id, posted), bumped_at=bumped_at)


def test_a_topic_closed_since_its_last_bump_joins_no_period_already_shown_as_closed():
    """A close (a small action: `no_bump`) moves a topic's last post and not its `bumped_at`, by which core orders
    the list: closed on the 19th, last bumped on the 17th, it sits past the pages read. It was placed by its last
    post, into the 19th, which the pages read had shown closed without it: that period's entry changed once the
    page holding it was read. Placed where core orders it, it joins the 17th, and the 19th is the same bytes."""
    end = bumped(300, DAY - timedelta(days=1, hours=12), DAY - timedelta(days=1, hours=12))
    page_0 = [*TOPICS[:8], end]
    closed = bumped(400, DAY - timedelta(hours=10), DAY - timedelta(days=3))
    shown = {e.id: e for e in digested(spec(), [listing(page_0, more=True)], page_0)}
    both = [*page_0, closed]
    whole = {e.id: e for e in digested(spec(), [listing(page_0, more=True), listing([closed], False, 1)], both)}
    day_19 = next(key for key in shown if key.endswith("/digest/2026-11-19"))
    assert whole[day_19] == shown[day_19] and count_of(shown[day_19]) == 4
    assert "/t/t/400" in (next(e for key, e in whole.items() if key.endswith("/digest/2026-11-17")).content_html or "")


def test_the_pages_read_end_where_core_ordered_the_last_one():
    """An edit of a topic's last post bumps it (lib/post_revisor.rb `bump_topic`) and leaves its last post's date:
    the last topic read, bumped early on the 19th and last posted to on the 18th, ended the pages on the 18th, so
    the 19th was shown closed though a topic posted to at 00:30 that day sat on the next page. The pages end at
    its `bumped_at`: the 19th is left out until the rest of it is read."""
    edited = bumped(300, DAY - timedelta(days=1, hours=12), DAY - timedelta(hours=23))
    page_0 = [*TOPICS[:8], edited]
    days = [day_of(e) for e in digested(spec(), [listing(page_0, more=True)], page_0)]
    assert days == ["2026-11-20"]


def test_a_json_list_gives_its_topics_bumped_at_and_keeps_their_last_post_as_their_date():
    import json

    from feedbridge.discourse.json_pages import parse_json_listing

    raw = {"topic_list": {"topics": [{"id": 5, "title": "t", "slug": "t", "last_posted_at": "2026-11-19T10:00:00Z",
                                      "bumped_at": "2026-11-17T08:00:00Z", "posts_count": 2}]}}
    (parsed,) = parse_json_listing(json.dumps(raw), base_url=FORUM).topics
    assert (parsed.last_posted_at, parsed.bumped_at) == (DAY - timedelta(hours=14), DAY - timedelta(days=2, hours=16))


def test_a_topic_moves_between_periods_only_when_bumped():
    """A topic last posted to on the 15th, its last post edited (a bump) on the 17th, then closed on the 19th (a
    post without a bump): placed by its last post it moved to the 19th at the close, and placed by the earlier of
    the two dates from the 15th to the 17th, from one closed period into another. Placed where core orders it, it
    moves only when bumped, and a bump is always now."""
    edited = bumped(500, DAY - timedelta(days=5), DAY - timedelta(days=3))
    closed = replace(edited, last_posted_at=DAY - timedelta(hours=5))

    def days_of(extra: Topic) -> set[str]:
        listed = [*TOPICS, extra]
        return {day_of(e) for e in digested(spec(), [listing(listed, more=False)], listed)
                if "/t/t/500" in (e.content_html or "")}

    assert days_of(edited) == days_of(closed) == {"2026-11-17"}
