"""A digest feed (`digest=daily` or `weekly`): one entry per UTC day or ISO week that had matching topics.

Pure: each entry (`models.Entry`, made here, as what it stands for) is a function of its period's topics
alone. So a closed period's entry has the same bytes on every rebuild and every instance
(its id comes from `FeedSpec.digest_id`, never from the request's host, format or `limit=`), and activity
elsewhere, which only makes or changes the newest period's entry, leaves it as it was.

A topic belongs to the period of its last activity (`_placed`). When the list goes on past the pages read, the
period the pages end in may have lost topics off the end and would change as the list moves: it is left out, and
every older one with it, unless that leaves nothing.

Core orders its lists by `bumped_at`, which a topic's last post does not always move with: a close, a pin or
another small action moves `last_posted_at` alone, an edit of the last post `bumped_at` alone (lib/post_creator.rb
`update_topic_stats`, `no_bump`; lib/post_revisor.rb `bump_topic`). So a topic on a page not read could have a
newer last post than the end of what was read, and fall into a period already shown as closed. A JSON list
carries both: a topic is placed where core orders it, at its last bump, and the pages end at the last one's, so
every topic not read is placed at or before that end; and since a bump is always now, a topic only ever moves
into the newest period (placed by the earlier of the two, a topic edited then closed moved between closed
periods). A Markdown list carries only the last post: there the end is the last one's, and a topic closed since
it was last bumped may still join a period shown as closed.

Where the pages end is read from the list's order, never from its oldest topic: core lists pinned topics first
on page 0 (lib/topic_query.rb #prioritize_pinned_topics), and an old pinned welcome topic there would otherwise
pass for the end, so that the period truly cut off would be shown as a closed day with topics missing. A
Markdown list does not mark its pinned topics, but they sit at the top either way; a JSON list's `pinned` is
skipped too.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta

from feedbridge.feeds.request.spec import FeedSpec
from feedbridge.models import Entry, Listing, Topic
from feedbridge.render.meta import CLOCK_SKEW

_OLDEST = datetime.min.replace(tzinfo=UTC)


def period_of(digest: str, moment: datetime) -> tuple[str, date]:
    """The period's label ("2026-11-30", "2026-W48") and its first day."""
    day = moment.astimezone(UTC).date()
    if digest == "daily":
        return day.isoformat(), day
    year, week, weekday = day.isocalendar()
    return f"{year}-W{week:02d}", day - timedelta(days=weekday - 1)


def digested(spec: FeedSpec, listings: Sequence[Listing], topics: Sequence[Topic],
             since: datetime | None = None, now: datetime | None = None) -> list[Entry]:
    """`topics` (the feed's, filtered) as the entries of the spec's digest, newest period first (a feed of no
    digest has one entry per topic: `render.meta.topic_entries`). With `since` (`max_age=`), only the periods that
    start from it: whole periods, so that a window moving on drops a period rather than changing one. A topic
    dated past `now` (the build's time) by more than `CLOCK_SKEW` is in no period, as it dates no feed: a topic of
    9999 made a period that had not begun, forever the newest, which took one of `limit=`'s."""
    digest = spec.digest
    assert digest is not None, "a feed of no digest has an entry per topic, not periods"
    latest = None if now is None else now + CLOCK_SKEW
    periods: dict[tuple[str, date], list[Topic]] = {}
    for topic in topics:
        if (placed := _placed(topic)) is not None and (latest is None or placed <= latest):
            periods.setdefault(period_of(digest, placed), []).append(topic)
    newest = sorted(periods, key=lambda period: period[1], reverse=True)
    end = _end_of_pages(listings, by_activity=not spec.ranked)
    if end is not None:
        cut = period_of(digest, end)[1]
        newest = [period for period in newest if period[1] > cut] or newest[:1]
    if since is not None:
        newest = [period for period in newest if datetime.combine(period[1], time(), UTC) >= since]
    newest = newest[: spec.digest_limit]
    return [_entry(spec, label, start, periods[(label, start)]) for label, start in newest]


def _end_of_pages(listings: Sequence[Listing], by_activity: bool) -> datetime | None:
    """Where what was read ends, when the list goes on past the pages read; None when they hold all of it.
    A list in activity order ends at its last topic that is not pinned. One in another order (top, hot)
    may miss topics of any period: it ends at its oldest activity, pinned topics left out, so that only
    that oldest period is left out, as it always was."""
    if not listings or listings[-1].next_page_url is None:
        return None
    read = [at for listing in listings for t in listing.topics if not t.pinned and (at := _placed(t)) is not None]
    if not read:
        return None
    return read[-1] if by_activity else min(read)


def _placed(topic: Topic) -> datetime | None:
    """Where a topic sits among the periods: where its list orders it (`Topic.bumped_at`), else its last post (a
    Markdown list's only date; see the module docstring)."""
    return topic.bumped_at or topic.last_posted_at


def _entry(spec: FeedSpec, label: str, start: date, topics: list[Topic]) -> Entry:
    """The period's entry: its id names the period (no page has that address), its dates are its start and its
    newest activity, its content the list of its topics, most replied first. Both by where the topics are placed
    (`_placed`): a topic closed since adds no activity to a closed period."""
    ordered = sorted(topics, key=lambda t: (t.replies or 0, _placed(t) or _OLDEST), reverse=True)
    count = len(ordered)
    return Entry(
        kind="digest",
        id=f"{spec.digest_id}/digest/{label}",
        # A link of its own: some readers take entries with one link for one entry.
        link=f"{spec.html_url}#digest-{label}",
        title=f"{label}: {count} topic{'' if count == 1 else 's'}",
        published=datetime(start.year, start.month, start.day, tzinfo=UTC),
        updated=max(_placed(t) or _OLDEST for t in ordered),
        content_html="<ul>" + "".join(_item(t) for t in ordered) + "</ul>",
    )


def _item(topic: Topic) -> str:
    figures = [f"by {html.escape(topic.author)}" if topic.author else "by a deleted user"]
    if topic.replies is not None:
        figures.append(f"{topic.replies} repl{'y' if topic.replies == 1 else 'ies'}")
    if topic.likes is not None:
        figures.append(f"{topic.likes} like{'' if topic.likes == 1 else 's'}")
    link = f'<a href="{html.escape(topic.url)}">{html.escape(topic.title)}</a>'
    return f"<li>{link} · {' · '.join(figures)}</li>"
