"""Post feeds: one topic's posts (`/t/ID`), a forum's latest posts (`/posts`), one user's posts (`/u/USER/posts`).

Each post is kept with its cooked HTML through the same nh3 sanitizer as full-content topic feeds, links made
absolute against the post's URL (`shown`), and the posts a feed keeps become its entries (`post_entry`): its
own entry id (`https://forum/t/TOPIC/NUMBER`, stable forever, since post numbers are never reused), its
permalink, the topic's title (or "Re: title #N" for a reply, so a reader tells replies from new topics), its
author, its `created_at` as published and `updated_at` as updated. They are selected as entries
(`FeedFilter.keeps_post`: author=, q= over the post's text and its topic's title, max_age= over its own time,
limit= after filtering), so formats, `.html` views and previews work as for topic feeds. Every forum serves
these JSON documents: Markdown forums are read the same way.

What each costs the forum (every request goes through `Gate.fetch`: budget, slots, Retry-After):

- A topic: its head, `/t/ID.json` (the first 20 posts and every post id), cached for the cache TTL and then
  read again (revalidated where the forum sends an ETag; core sends none); then only the newest ids not read
  before, `BATCH` to a `/t/ID/posts.json?post_ids[]=…` request. Posts read are kept per topic (`PostsEntry`,
  by post id, for the topic TTL), so a quiet topic costs the head's revalidation and nothing else, and a busy
  one the head and a batch of its new posts. The newest 20 of a 446-post topic cost two requests; a topic of
  100,000 posts costs what one of 100 does (only the end of its stream is read).
- `limit=` counts posts: small actions ("closed", "pinned"), whispers, deleted, hidden and withdrawn posts
  take a slot of the stream but no entry, so the end is read back in rounds (`_newest`: `limit + SLACK`
  slots, then at least a batch more each round) until `limit` posts are found, the stream ends, or
  `limit + MAX_SKIPPED` slots were looked at (a closed topic's `limit=1` is its last post; one ending in
  150 small actions costs its head and three batches, and its feed is empty).
- A mega topic (core's `TopicView::MEGA_TOPIC_POSTS_COUNT`, 10,000 posts or more) is sent without its
  stream, with `lastId` and `highest_post_number`: the ids of its end come from one
  `/t/ID/post_ids.json?post_number=N` (every id after post N, N = highest - limit - SLACK), held while
  `lastId` stays the same, then batches as above. The newest 30 of a 12,000-post topic cost three
  requests; a quiet poll the head's revalidation, a busy one that, the ids of its end and one batch.
- `/posts`: `pages=` pages of `/posts.json` (50 posts each; `before=` the oldest id read, and the forum sends
  the posts older than it, `LatestPostsQuery#public_posts`; one repeated anyway would be dropped),
  `/u/USER/posts`: `pages=` pages of `/user_actions.json?filter=4,5` (30 rows each, by `offset=`). Each
  collection is cached for the cache TTL and shared by every format and filter. User actions carry excerpts
  only; `content=full` reads the newest posts' bodies (up to the topic budget, within the request's deadline)
  from the same batches and heads, and the rest keep their excerpt. A page that repeats what was read, or goes on
  past `pages=`, ends the paging: loops cost at most `pages=`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypeVar
from urllib.parse import urlencode

import msgspec

from feedbridge.config import Forum, Settings
from feedbridge.discourse.fields import avatar_url, topic_slug, user_link
from feedbridge.discourse.posts import (
    parse_latest_posts,
    parse_post_batch,
    parse_post_ids,
    parse_topic_head,
    parse_user_actions,
)
from feedbridge.errors import (
    DeadlinePassed,
    NoForumAnswer,
    NotATopicError,
    NotHeld,
    NotPostsError,
    UpstreamRefused,
    explained,
)
from feedbridge.feeds.admission.callers import CallerPool
from feedbridge.feeds.request.spec import FeedSpec
from feedbridge.feeds.select.filters import FeedFilter
from feedbridge.feeds.sources.reads import Read
from feedbridge.models import Entry, Listing, Post, TopicHead
from feedbridge.render.meta import entry_id, titled
from feedbridge.render.sanitize import MAX_COOKED_CHARS, sanitize_html
from feedbridge.store import keys
from feedbridge.store.entries import CollectedEntry, HeadEntry, PostsEntry, Shown

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_LIMIT = 30
BATCH = 50
"""Post ids per `/t/ID/posts.json` request (core takes any number; 50 keeps URLs near 1 KB)."""
LATEST_PAGE = 50
ACTIONS_PAGE = 30
FILTERED_WINDOW = 50
"""With author= or q=, a topic feed looks at this many newest posts per `pages=`: the limit counts matches."""
SLACK = 5
"""Slots read past the window in a topic's first round: a closed, pinned or auto-closed topic ends with
small actions, which take no entry, and a second round would cost a request more."""
MAX_SKIPPED = 100
"""Slots that are no post a topic feed looks past before it gives up finding more posts."""
KEPT_PER_TOPIC = 1000
"""Posts of one topic kept read (`PostsEntry`): the newest (post ids grow with time)."""
FEED_CONTENT_CHARS = 16 * 1024 * 1024
"""Characters of posts' HTML one feed carries, the newest posts': a forum's 500 posts of 96 KB each made a
`limit=500` feed of 135 MB and +430 MB of a worker's memory (RELIABILITY.md row 73). 16 MiB holds 500 of the
longest posts core lets a member write (`max_post_length`, 32,000 characters); posts past it are entries with
their title, link, author and dates, without their content.

The same bound holds what is kept read (`_Room`): of a topic's posts (`PostsEntry`) and of a list of posts
(`CollectedEntry`), the newest carry their HTML while its cooked length fits, and older ones are kept read
without it. No feed could carry more, and a build sanitizes no more: 500 posts of 96 KB were 46 MB of
sanitized HTML kept per topic, more than the cache holds beside the feed, so it was never kept and every
poll and every variant asked the forum for every batch again and sanitized them all, about 11 s of CPU
(RELIABILITY.md row 76). Bounded, the posts read fit the cache and are read and sanitized once; a build that
finds them evicted sanitizes 16 MiB at most. Why not sanitize lazily what the feed carries: the same posts
would be cleaned again on each variant, and what is kept would still be too large to keep. Why not cut each
post shorter: a post core cooks from 32,000 characters can be longer than that (links, quotes, oneboxes),
and only a topic far past what core lets its members write reaches this bound."""
_OLDEST = datetime.min.replace(tzinfo=UTC)


def shown(post: Post, base: str, read_at: float) -> Shown:
    """The post as it is kept: its cooked HTML sanitised, once (see the module docstring)."""
    content = None
    if post.cooked is not None:
        cooked = post.cooked if len(post.cooked) <= MAX_COOKED_CHARS else post.cooked[:MAX_COOKED_CHARS] + "…"
        content = sanitize_html(cooked, _post_url(post, base)) or None
    return Shown(replace(post, cooked=None), content, read_at)


@dataclass
class _Room:
    """What is left of `FEED_CONTENT_CHARS` while posts are kept read, the newest first: each takes its HTML's
    length (a post still to be sanitized its cooked length, as cut, which is what the sanitizer is handed);
    once nothing is left, neither it nor any post after it keeps its HTML (see `FEED_CONTENT_CHARS`)."""

    left: int = FEED_CONTENT_CHARS

    def fits(self, chars: int) -> bool:
        """Whether `chars` more of HTML fit, taking them: once one does not, nothing after it does."""
        self.left -= chars
        return self.left >= 0

    def shown(self, post: Post, base: str, read_at: float) -> Shown:
        """`shown` while there is room for the post's HTML, else the post kept read without it, unsanitized."""
        if post.cooked is None or self.fits(min(len(post.cooked), MAX_COOKED_CHARS)):
            return shown(post, base, read_at)
        return Shown(replace(post, cooked=None), None, read_at)

    def held(self, kept: Shown) -> Shown:
        """A post kept before, with its HTML while there is room for it (newer posts read since take theirs first)."""
        if not kept.content_html or self.fits(len(kept.content_html)):
            return kept
        return replace(kept, content_html=None)


def post_entry(shown: Shown, base: str) -> Entry:
    """The post as a feed's entry (see the module docstring); where the forum named no topic title, "Topic N"."""
    post = shown.post
    untitled = f"Topic {post.topic_id}"
    title = post.topic_title or untitled
    author = post.username
    return Entry(
        kind="post",
        id=f"{base}/t/{post.topic_id}/{post.post_number}",
        link=_post_url(post, base),
        title=titled(title, untitled) if post.post_number == 1 else f"Re: {title} #{post.post_number}",
        author=author,
        author_url=user_link(base, author),
        author_avatar=avatar_url(post.avatar_template, base),
        published=post.created_at,
        updated=_updated(post),
        summary=post.excerpt if shown.content_html is None else None,
        content_html=shown.content_html,
        comments=entry_id(base, post.topic_id),
        post_number=post.post_number,
    )


def _post_url(post: Post, base: str) -> str:
    """The post's permalink, core's `/t/{slug}/{topic id}/{post number}`, made of its topic's id and slug on the
    forum (`fields.topic_slug`: never a segment that makes the link another page's)."""
    return f"{base}/t/{topic_slug(post.topic_slug)}/{post.topic_id}/{post.post_number}"


def _updated(post: Post) -> datetime | None:
    return post.updated_at or post.created_at


def _key(shown: Shown) -> tuple[int, int]:
    """A post's place, which names it for good (its entry's id is made of it)."""
    return shown.post.topic_id, shown.post.post_number


def kept(feed_filter: FeedFilter, posts: Iterable[Shown], base: str, limit: int | None = DEFAULT_LIMIT) -> list[Entry]:
    """Unique posts, newest first by creation then post number, as entries, filtered, then cut to the limit;
    the newest carry their content while it fits `FEED_CONTENT_CHARS`."""
    room = _Room()
    return [entry if room.fits(len(entry.content_html or "")) else msgspec.structs.replace(entry, content_html=None)
            for _, entry in _kept(feed_filter, posts, base, limit)]


def _kept(feed_filter: FeedFilter, posts: Iterable[Shown], base: str,
          limit: int | None = DEFAULT_LIMIT) -> list[tuple[Shown, Entry]]:
    """`kept`, each entry beside its post; a `/posts?category=` keeps its category's and subcategories' (`within`)."""
    unique: dict[tuple[int, int], Shown] = {}
    for post in posts:
        unique.setdefault(_key(post), post)
    ordered = sorted(unique.values(), key=lambda s: (s.post.created_at or _OLDEST, s.post.post_number), reverse=True)
    inside = feed_filter.within
    pairs = [(s, post_entry(s, base)) for s in ordered if not inside or s.post.category_id in inside]
    if feed_filter.narrows:
        pairs = [(s, entry) for s, entry in pairs if feed_filter.keeps_post(entry)]
    return pairs if limit is None else pairs[:limit]


@dataclass(frozen=True, slots=True)
class PostFeeds:
    """The post feeds' part of `FeedService`: what `FeedService.entries` gives for a post route, in every scope,
    each read as its `Read` says (`feeds/sources/reads.py`)."""

    settings: Settings
    pool: CallerPool

    def entries(self, read: Read, spec: FeedSpec) -> tuple[Listing, list[Entry]]:
        """The feed's posts, as its entries; what the forum answered instead is told in the words list feeds use for it
        (`errors.explained`), so a private topic, a members-only forum or a bot wall reads the same here."""
        try:
            return self._entries(read, spec)
        except NoForumAnswer as exc:
            raise explained(exc, spec.forum.key, spec.label, keyed=self.settings.credential_for(spec.forum) is not None,
                            signed=read.signed) from None

    def _entries(self, read: Read, spec: FeedSpec) -> tuple[Listing, list[Entry]]:
        base = spec.forum.base_url
        limit = spec.filter.limit or DEFAULT_LIMIT
        if spec.kind == "topic_posts" and spec.topic_id is not None:
            head, posts = self._topic(read, spec)
            first = Listing(title=head.title, base_url=base, dialect="json", topics=())
            return first, kept(spec.filter, posts, base, limit=limit)
        if spec.kind == "posts":
            posts = self._collected(read, spec, self._latest_pages)
            first = Listing(title="latest posts", base_url=base, dialect="json", topics=())
            return first, kept(spec.filter, posts, base, limit)
        posts = self._collected(read, spec, self._action_pages)
        poster = (spec.poster or "").casefold()  # the title spells the user as the forum does, not as typed
        spelled = next((s.post.username for s in posts if (s.post.username or "").casefold() == poster), spec.poster)
        first = Listing(title=f"posts by {spelled}", base_url=base, dialect="json", topics=())
        if spec.content != "full":
            return first, kept(spec.filter, posts, base, limit=limit)
        candidates = [s for s, _ in _kept(replace(spec.filter, query=None), posts, base, limit=None)]
        full = self._full(read, spec.forum, candidates[: self.settings.topic_budget])
        shown = (full.get(_key(s), s) for s in candidates)
        return first, kept(spec.filter, (s for s in shown if s is not None), base, limit=limit)

    # --- one topic ---------------------------------------------------------------------------------------

    def _topic(self, read: Read, spec: FeedSpec) -> tuple[TopicHead, list[Shown]]:
        assert spec.topic_id is not None
        forum = spec.forum
        head = self._head(read, forum, spec.topic_id)
        window = spec.filter.limit or DEFAULT_LIMIT
        if spec.filter.narrows:
            window = max(window, FILTERED_WINDOW * spec.pages)
        return head, self._newest(read, forum, head, window)

    def _newest(self, read: Read, forum: Forum, head: TopicHead, window: int) -> list[Shown]:
        """The topic's newest `window` posts, newest first. What is no post (a small action, a whisper, a
        deleted, hidden or withdrawn post) takes no entry, so the stream's end is read back in rounds until
        that many are found: `window + SLACK` slots, then at least a batch more each round, never past
        `window + MAX_SKIPPED` slots (of a mega topic, post numbers) from the end."""
        bound = window + MAX_SKIPPED
        stream, found, seen = head.stream, list[Shown](), set[int]()
        looked, step = 0, window + SLACK
        while len(found) < window and looked < bound:
            looked = min(looked + step, bound)
            if head.last_id is not None:
                stream = self._end(read, forum, head, looked).stream
            chunk = [i for i in reversed(stream[-looked:]) if i not in seen]
            if not chunk:
                break
            seen.update(chunk)
            known = self._read(read, forum, head, chunk)
            found += [s for i in chunk if (s := known.get(i)) is not None]
            step = max(window - len(found) + SLACK, BATCH)
        return found[:window]

    def _end(self, read: Read, forum: Forum, head: TopicHead, span: int) -> TopicHead:
        """The end of a mega topic's stream, the ids of its posts numbered past `highest_post_number - span`
        (or all after its first page): held while the topic's `lastId` stays the same, else asked for in one
        request however many they are (`/t/ID/post_ids.json?post_number=N`, all the ids after post N)."""
        assert head.last_id is not None and head.highest_post_number is not None
        url = f"{forum.base_url}/t/{head.id}/post_ids.json"
        key = keys.post_head(forum.base_url, url)
        held: HeadEntry | None = read.scope.store.get(key)
        after = max(head.highest_post_number - span, 1)
        if (held is not None and held.head.last_id == head.last_id and held.head.after_number is not None
                and held.head.after_number <= after):
            return held.head
        asked = f"{url}?{urlencode([('post_number', str(after))])}"
        fetched = read.fetch(forum, asked, f"the newest posts of topic {head.id}")
        ids = _parsed(parse_post_ids, fetched.text, asked)
        if after == 1:  # the ids come after post 1, which is on the head's first page
            given = set(ids)
            ids = tuple(i for i, _ in head.read if i not in given) + ids
        end = replace(head, stream=ids, posts=(), read=(), skipped=0, after_number=after)
        read.scope.policy.keep_read(key, HeadEntry(end, None, None, time.time()))
        return end

    def _read(self, read: Read, forum: Forum, head: TopicHead, wanted: Sequence[int],
              inline: bool = False) -> dict[int, Shown | None]:
        """The posts of `wanted` ids: those read before (within the topic TTL), those on the head, and the
        rest in batches, newest first. A post read before is not asked for again within the topic TTL, so an
        edit to one shows when that has passed (to one of the first 20, when the head changes). A batch not
        read within the request's deadline fails the build, and so does, from stale copies, a post never
        read: a feed with a gap must not pass for the whole one."""
        base, now = forum.base_url, time.time()
        key = keys.posts_of(forum.base_url, head.id)
        held: PostsEntry | None = read.scope.store.get(key)
        ttl = read.scope.policy.keep_read_for
        known: dict[int, Shown | None] = {i: s for i, s in held.posts
                                          if s is None or now - s.read_at < ttl} if held else {}
        want, changed = set(wanted), held is None
        read_now: dict[int, Post | None] = {}  # what this call reads, shown below with what was kept
        for post_id, post in head.read:
            if post_id in want and (post_id not in known or _edited(known[post_id], post)):
                read_now[post_id] = post
        missing = [i for i in reversed(wanted) if i not in known and i not in read_now]
        if missing:
            batches = [missing[i : i + BATCH] for i in range(0, len(missing), BATCH)]
            def run(ids: list[int], ahead: int) -> tuple[tuple[int, Post | None], ...]:
                return self._batch(read.stepping(ahead), forum, head, ids)

            if inline:
                done = [self._batch(read, forum, head, b) for b in batches]
            else:
                try:
                    done = [got.result() for _b, got in self.pool.waves(batches, run, self.settings.fetch_concurrency,
                                                                           caller=read.caller)]
                except FutureTimeout:
                    raise DeadlinePassed(f"the {self.settings.request_deadline:g}s deadline passed while "
                                         f"reading {len(batches)} batches of posts") from None
            for batch, got in zip(batches, done, strict=True):
                asked = set(batch)  # what else a batch brings was not asked for, and is not read
                read_now.update(dict.fromkeys(batch))
                read_now.update((i, p) for i, p in got if i in asked)
        if read_now:
            known, changed = _merged(known, read_now, base, now), True
        if changed:
            newest = sorted(known.items(), reverse=True)[:KEPT_PER_TOPIC]
            read.scope.policy.keep_read(key, PostsEntry(tuple(newest), now))
        return known

    def _head(self, read: Read, forum: Forum, topic_id: int) -> TopicHead:
        head = read_head(read, forum, topic_id)
        if head.unreadable is not None:
            raise UpstreamRefused(f"upstream sent something that is not what {forum.base_url}/t/{topic_id}.json "
                                  f"names: {head.unreadable}")
        return head

    def _batch(self, read: Read, forum: Forum, head: TopicHead,
               ids: Sequence[int]) -> tuple[tuple[int, Post | None], ...]:
        query = urlencode([("post_ids[]", str(i)) for i in ids])
        url = f"{forum.base_url}/t/{head.id}/posts.json?{query}"
        fetched = read.fetch(forum, url, f"{len(ids)} posts of topic {head.id}")
        return _parsed(lambda text: parse_post_batch(text, head), fetched.text, url)

    # --- the forum's latest posts, a user's posts ---------------------------------------------------------

    def _collected(self, read: Read, spec: FeedSpec, pages: Callable[[Read, FeedSpec], list[Shown]]) -> list[Shown]:
        key = keys.post_list(spec.forum.base_url, spec.kind, spec.poster, spec.pages)
        entry: CollectedEntry = read.entry(key, lambda _held, within: CollectedEntry(tuple(pages(within, spec)),
                                                                                     time.time()),
                                           f"the {spec.label} of {spec.forum.key}", spec.forum)
        return list(entry.posts)

    def _latest_pages(self, read: Read, spec: FeedSpec) -> list[Shown]:
        base = spec.forum.base_url
        return _paged(read, spec, parse_latest_posts, LATEST_PAGE, f"{base}/posts.json",
                      lambda _page, rows: f"{base}/posts.json?before={min(i for i, _ in rows)}")

    def _action_pages(self, read: Read, spec: FeedSpec) -> list[Shown]:
        def url(page: int, _rows: object = None) -> str:
            query = urlencode([("offset", str(page * ACTIONS_PAGE)), ("username", spec.poster or ""),
                               ("filter", "4,5")])
            return f"{spec.forum.base_url}/user_actions.json?{query}"

        return _paged(read, spec, parse_user_actions, ACTIONS_PAGE, url(0), url)

    def _full(self, read: Read, forum: Forum, posts: list[Shown]) -> dict[tuple[int, int], Shown | None]:
        """The bodies of user-action posts (which carry excerpts), by their place (`_key`): per topic its head
        (which holds the first post) and batches of the replies' ids, read and cached as a topic feed's are (None:
        its topic says it is no post). A post whose topic fails, or is not reached in time, keeps its excerpt."""
        groups: dict[int, list[Shown]] = {}
        for post in posts:
            groups.setdefault(post.post.topic_id, []).append(post)

        def bodies(topic_id: int, read: Read) -> dict[tuple[int, int], Shown | None]:
            head = self._head(read, forum, topic_id)
            ids = [s.post.post_id for s in groups[topic_id] if s.post.post_id is not None]
            if any(s.post.post_id is None for s in groups[topic_id]):
                ids += [i for i, p in head.read if p is not None and p.post_number == 1]
            known = self._read(read, forum, head, ids, inline=True)
            # What the topic says is no post (withdrawn: core's actions list it until it is deleted) drops out.
            gone = {_key(s): None for s in groups[topic_id] if known.get(s.post.post_id or 0, s) is None}
            # A post kept without its HTML (past `FEED_CONTENT_CHARS`, or nested past what is parsed) keeps its excerpt.
            return gone | {_key(s): s for s in known.values() if s is not None and s.content_html is not None}

        found: dict[tuple[int, int], Shown | None] = {}
        order = list(groups)
        taken = 0
        try:
            for topic_id, done in self.pool.waves(order, lambda tid, ahead: _or_none(bodies, tid, read.stepping(ahead)),
                                                  self.settings.fetch_concurrency, caller=read.caller):
                got, taken = done.result(), taken + 1
                if got is None:
                    log.warning("content=full: the posts of topic %d keep their excerpt", topic_id)
                    continue
                found.update(got)
        except FutureTimeout:
            log.warning("post feed: the %gs deadline passed; the posts of %d of %d topics read",
                        self.settings.request_deadline, taken, len(order))
        return found


def _paged(read: Read, spec: FeedSpec, parse: Callable[[str], Sequence[tuple[int, Post | None]]], size: int,
           first: str, following: Callable[[int, Sequence[tuple[int, Post | None]]], str]) -> list[Shown]:
    """Up to `spec.pages` pages of a list of posts, from `first`, each next one's URL made by `following`
    (its number and the rows of the page before): until a page brings no post not seen or is short of
    `size`. Deleted or hidden posts (None) hold their id, so a later page repeating them adds nothing."""
    base, room = spec.forum.base_url, _Room()  # the pages come newest first: their newest posts keep their HTML
    posts: dict[int, Shown | None] = {}
    url = first
    for page in range(1, spec.pages + 1):
        rows = _parsed(parse, read.fetch(spec.forum, url, url).text, url)
        new = [(i, p) for i, p in rows if i not in posts]
        now = time.time()
        posts.update((i, None if p is None else room.shown(p, base, now)) for i, p in new)
        if not new or len(rows) < size:
            break
        url = following(page, rows)
    return [s for s in posts.values() if s is not None]

def read_head(read: Read, forum: Forum, topic_id: int, url: str | None = None, *,
              fresh_for: float | None = None, keep_for: float | None = None) -> TopicHead:
    """A topic's `/t/ID.json`, the one reader of it: for the topic's post feed and for `content=full` over JSON
    lists (`feeds/sources/topic_pages.py`), under one key, so a topic read for one is not fetched again for the other.
    `url` is where it is asked for: a list's link to the topic with `.json` (`content=full`), else `/t/ID.json`, the
    same document (revalidated either way where the forum sends an ETag). `fresh_for` and `keep_for` are the cache
    policy's unless the caller says (`content=full` keeps a head read after the topic's last activity)."""
    url = url or f"{forum.base_url}/t/{topic_id}.json"

    def fetch(held: HeadEntry | None, read: Read) -> HeadEntry:
        fetched = read.fetch(forum, url, url, held.etag if held else None, held.last_modified if held else None)
        if fetched.status == 304 and held is not None:
            return replace(held, stored_at=time.time())
        head = _parsed(parse_topic_head, fetched.text, url)
        if head.id != topic_id:
            raise UpstreamRefused(f"upstream sent topic {head.id} for {url}, not topic {topic_id}")
        return HeadEntry(head, fetched.etag, fetched.last_modified, time.time())

    entry: HeadEntry = read.entry(keys.topic_head(forum.base_url, topic_id), fetch, url, forum, fresh_for=fresh_for,
                                  keep_for=keep_for)
    return entry.head


def _merged(kept: Mapping[int, Shown | None], read_now: Mapping[int, Post | None], base: str,
            now: float) -> dict[int, Shown | None]:
    """What was kept of a topic's posts and what was read of them now, by post id: the newest first, kept and
    read alike, share `FEED_CONTENT_CHARS` (`_Room`), so a post read now is sanitized only where it fits, and
    one kept before gives its HTML up to newer posts that need the room."""
    room, merged = _Room(), dict[int, Shown | None]()
    for post_id in sorted(kept.keys() | read_now.keys(), reverse=True):
        if post_id in read_now:
            post = read_now[post_id]
            merged[post_id] = None if post is None else room.shown(post, base, now)
        else:
            held = kept[post_id]
            merged[post_id] = None if held is None else room.held(held)
    return merged


def _edited(held: Shown | None, post: Post | None) -> bool:
    """Whether the head holds a newer edit of a post than the one read before, or says it is no post now (hidden,
    withdrawn, a whisper: kept in core's stream) or again: a copy read before stood until the topic TTL ended."""
    if (held is None) != (post is None):
        return True
    if held is None or post is None or post.updated_at is None:
        return False
    before = _updated(held.post)
    return before is None or post.updated_at > before


def _or_none(run: Callable[[int, Read], T], value: int, read: Read) -> T | None:
    try:
        return run(value, read)
    except (NoForumAnswer, NotHeld) as exc:
        log.info("content=full: %s", exc.message)
        return None


def _parsed(parse: Callable[[str], T], text: str, url: str) -> T:
    try:
        return parse(text)
    except (NotPostsError, NotATopicError) as exc:
        raise UpstreamRefused(f"upstream sent something that is not what {url} names: {exc}") from None
