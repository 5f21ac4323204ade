"""Topics read from their own pages for `content=full`: the first post, creation date, category and tags.

A list gives a topic's excerpt; its page (`/t/SLUG/ID.md` or `.json`, by the forum's source) gives the rest.
Pages are read in waves of `fetch_concurrency` through the pool, within the request's deadline. A Markdown
page is cached by the topic's last activity (so it never goes stale: a new post is a new key), a deleted
topic remembered as such for the cache TTL. A JSON page is the topic's head, read as the topic's post feed
reads it (`post_feeds.read_head`: one key, one fetch for both), and serves while it was read after the
topic's last activity.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from feedbridge.config import Forum, Settings
from feedbridge.errors import DeadlinePassed, NoForumAnswer, NotATopicError, NotHeld, UpstreamError, UpstreamNotFound
from feedbridge.feeds.admission.callers import CallerPool
from feedbridge.feeds.sources.dialects import PAGE_FIELDS, Source
from feedbridge.feeds.sources.post_feeds import read_head
from feedbridge.feeds.sources.reads import Read
from feedbridge.models import Topic, merged
from feedbridge.store import keys
from feedbridge.store.entries import HeadEntry, TopicEntry, topic_bytes
from feedbridge.upstream.fetcher import is_within

log = logging.getLogger(__name__)

SLOW_SHARE = 0.5
"""Of the request's deadline, what the topic pages must have had, unanswered, to count as slow for everyone."""


@dataclass
class TopicPages:
    """The topic pages of every scope, each read as its `Read` says (`feeds/sources/reads.py`); `failures` counts the
    reads the forum failed since the process started, in every scope (`/healthz`)."""

    settings: Settings
    pool: CallerPool
    failures: int = field(default=0, init=False)

    def enriched(self, read: Read, forum: Forum, topics: list[Topic]) -> list[Topic]:
        """Each topic with what its page adds; its excerpt alone when that fails.

        Within the request's deadline: when it passes, the topics not read by then keep what is cached of
        them, the fetches under way finish in the background (and are cached, or remembered as failed),
        those not started never start (cancelled by the wave, or refused by `_page` when a busy pool starts
        them late). When the pages had at least `SLOW_SHARE` of the deadline and did not answer in it, the
        forum's topic pages count as slow for the negative TTL, for every reader, so the next rebuild uses what
        is cached without asking again. A request that reaches its topic pages with less left (its list took
        its time) says nothing of them, and marks nothing: else a client whose own reads spent its deadline
        would take the first posts out of everyone's feeds.
        """
        source = read.source(forum)
        slow_key = keys.topic_slow(forum.base_url)
        if read.scope.control.get(slow_key) is not None:
            return [self._held(read, forum, source, topic) for topic in topics]
        results: list[Topic] = []
        failures = 0
        began = time.monotonic()
        policy = read.scope.policy
        fresh_for, keep_for = policy.fresh_for, policy.keep_read_for  # the same for every topic of the feed
        try:
            for topic, done in self.pool.waves(topics,
                                               lambda topic, ahead: self._page(read, ahead, forum, source, topic,
                                                                               fresh_for, keep_for),
                                               self.settings.fetch_concurrency, caller=read.caller):
                try:
                    results.append(done.result())
                except NotHeld:
                    results.append(topic)
                except (NoForumAnswer, NotATopicError, ValueError) as exc:
                    failures += 1
                    log.warning("content=full: topic %d falls back to its excerpt: %s", topic.id, exc)
                    results.append(topic)
        except FutureTimeout:
            log.warning("content=full: the %gs deadline passed; %d topics keep their excerpt",
                        self.settings.request_deadline, len(topics) - len(results))
            slow = time.monotonic() - began >= SLOW_SHARE * self.settings.request_deadline
            if slow and self.settings.negative_ttl > 0:
                read.scope.control.set(slow_key, time.time(), self.settings.negative_ttl)
            results += [self._held(read, forum, source, topic) for topic in topics[len(results):]]
        if failures:
            self.failures += failures
            log.warning("content=full: %d of %d topic fetches failed", failures, len(topics))
        return results

    def held(self, read: Read, forum: Forum, topics: list[Topic]) -> list[Topic]:
        """Each topic with what is cached of its page, asking the forum nothing: the topics past the topic budget.
        They were left to their excerpts, so a topic whose page an earlier build had read lost its content, and
        its RSS date (its creation, where the list has none) went to its last activity, when a newer topic
        pushed it past the budget."""
        if not topics:
            return topics
        source = read.source(forum)
        return [self._held(read, forum, source, topic) for topic in topics]

    def _held(self, read: Read, forum: Forum, source: Source, topic: Topic) -> Topic:
        if source.from_head is not None:
            head: HeadEntry | None = read.scope.store.get(keys.topic_head(forum.base_url, topic.id))
            return topic if head is None else source.from_head(topic, head.head, forum.base_url)
        entry: TopicEntry | None = read.scope.store.get(keys.topic(forum.base_url, topic.id, topic.last_posted_at))
        return topic if entry is None else merged(topic, entry.topic, PAGE_FIELDS)

    def _page(self, read: Read, ahead: int, forum: Forum, source: Source, topic: Topic, fresh_for: float,
              keep_for: float) -> Topic:
        """The topic enriched from its page, read as a job of a wave with `ahead` reads left (`Read.stepping`);
        UpstreamTimeout, before any work, when the pool starts it after the request's deadline (nobody waits for
        it then; nothing is stored, so no failure is remembered). `fresh_for`, `keep_for`: the policy's for a
        copy and for what is keyed by its own version."""
        caller = read.caller
        if caller is not None and caller.left() <= 0:
            raise DeadlinePassed(f"the request's deadline passed before topic {topic.id} was read")
        if not is_within(forum, topic.url, self.settings.forums):
            raise UpstreamError(f"topic URL {topic.url} is not under {forum.base_url}")
        url = topic.url + source.suffix  # the page as the forum's source serves it
        if source.from_head is not None:
            head = read_head(read.stepping(ahead), forum, topic.id, url, fresh_for=_read_after(topic, fresh_for),
                             keep_for=keep_for)
            return source.from_head(topic, head, forum.base_url)
        read_topic = source.read_topic
        assert read_topic is not None  # a source reads its topics' pages one way or the other
        key = keys.topic(forum.base_url, topic.id, topic.last_posted_at)

        def fetch(_held: TopicEntry | None, read: Read) -> TopicEntry:
            try:
                fetched = read.fetch(forum, url, url)
                full = read_topic(topic, fetched.text, forum.base_url, fetched.url)
            except (UpstreamNotFound, NotATopicError):
                read.scope.policy.remember_missing(key, TopicEntry(None, time.time(), 0))  # holds no topic
                raise
            return TopicEntry(full, time.time(), topic_bytes(full))

        # A topic entry is keyed by its last activity, so it never goes stale: fresh until its TTL ends.
        entry: TopicEntry = read.entry(key, fetch, f"topic {topic.id}", forum, fresh_for=float("inf"),
                                       keep_for=keep_for, ahead=ahead)
        return merged(topic, entry.topic, PAGE_FIELDS)


def _read_after(topic: Topic, fresh_for: float) -> float:
    """How long a held head serves `content=full`: while it was read after the topic's last activity as its
    list says (a new post is what makes a new head), and in any case for `fresh_for`; always when the list
    gives no activity."""
    if topic.last_posted_at is None:
        return float("inf")
    return max(fresh_for, time.time() - topic.last_posted_at.timestamp())
