"""Which source reads an `auto` forum: its Markdown lists or its JSON lists, as a small state machine.

Only the probe decides: the forum's own `/latest.md`, the list every public forum has. Feed requests
choose which other lists are read (a private category, a list that answers garbage), so what those
answer is that feed's error and never a transition: no reader can move the decision that every other
reader's feeds are built with.

States: (none), UNDECIDED, MARKDOWN, JSON. A probe runs when the record is due; its answer moves it:

        ┌───────────────────── a Markdown list ─────────────────────┐
        │                                                           ▼
    (none) or UNDECIDED ───────── refused ─────────▶ JSON ◀─────▶ MARKDOWN
        │   ▲                                         ▲     a list ▶ MARKDOWN and refused ▶ JSON from
        │   └── /latest.json no list ──┐              │     either; inconclusive keeps the decision
        └──── inconclusive ────────────┴── /latest.json a list

    probe of /latest.md   a Markdown list   refused: 404/410,     inconclusive: timeout,    429: the forum's, or
                                            401/403, not a list   5xx, too large, a bot     the bridge's budget
                                                                  wall (but see below) ...
    (none)                MARKDOWN          JSON                  JSON if /latest.json is   (none), the feed's error
    UNDECIDED             MARKDOWN          JSON                  a list, else UNDECIDED    UNDECIDED, still due
    MARKDOWN              MARKDOWN          JSON                  MARKDOWN                  MARKDOWN, still due
    JSON                  MARKDOWN          JSON                  JSON                      JSON, still due

A bot wall (`errors.BotWall`: a challenge page instead of the forum) is never "refused": the forum behind it
may well serve Markdown. Nor is a crawler policy that refuses the bridge (`errors.CrawlerRefused`, core's
`403 Crawler is not allowed!` to every anonymous request, JSON ones too): both are handled alike. With a
decision it is inconclusive; with none (or UNDECIDED) it is handled as a 429 is, the feed's error with
nothing written, since `/latest.json` stands behind the same wall.

Every record says when it is due: a conclusive probe after `FEEDBRIDGE_SOURCE_RECHECK`; an inconclusive
one (and a JSON decision reached through `/latest.json`, while `/latest.md` itself stays inconclusive)
a tenth of that (at most `RETRY`), so a forum that recovers is read the way it wants soon. With no
decision, JSON is tried before Markdown is assumed: every Discourse release serves `/latest.json`, so a
forum whose Markdown probe fails (500, an oversized or slow answer) is read from what it does serve
rather than through `.md` URLs that fail; UNDECIDED reads Markdown, the one source left. A 429 changes
nothing: a record made then would hold for every reader on the strength of the forum's wait or of one
client's spent budget share.

The record is control state (`SourceEntry`), shared through the store so every worker and process
detects a forum once per period; concurrent requests that find it due share one probe, charged to the
caller like any upstream request. The probes read through the page cache (`reads.list_page`, with the read
of the request that found the record due: live, in its scope), so a `/latest` feed built just after reads
the probe's page from there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from feedbridge.config import Forum, Settings
from feedbridge.errors import (
    BotWall,
    BridgeBusy,
    CrawlerRefused,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
    UpstreamRefused,
)
from feedbridge.feeds.request.spec import FeedSpec
from feedbridge.feeds.sources.dialects import JSON, MARKDOWN, PROBE_PATH, SOURCES, Source
from feedbridge.feeds.sources.reads import Read, list_page
from feedbridge.store import keys
from feedbridge.store.control import ControlStore
from feedbridge.store.entries import SourceEntry
from feedbridge.store.protocols import Flight

log = logging.getLogger(__name__)

UNDECIDED = "undecided"
"""The record's state while no probe has decided: the lists are read as Markdown, the next probe starts over."""
RETRY = 60.0
"""Seconds (at most) until an inconclusive probe is asked again: a tenth of the re-check period, up to this."""


@dataclass(frozen=True, slots=True)
class SourceDetector:
    """One scope's decisions (`control`, `flight`: the scope's own, `feedbridge.store.scoped`)."""

    settings: Settings
    control: ControlStore
    flight: Flight

    def source(self, read: Read, forum: Forum) -> Source:
        """The configured source, else the decided one, probing first when the record is due. `read` is a
        live read in this detector's scope (`Read.source` sends only those here): the probes read through it."""
        if forum.source != "auto":
            return SOURCES[forum.source]
        key = self.key(forum)
        entry: SourceEntry | None = self.control.get(key)
        if self._due(entry):
            previous = entry
            entry = self.flight.do(key, lambda: self._probe(read, forum, key, previous),
                                   self.settings.singleflight_wait, lambda: self._settled(key))
        return _read_by(entry)

    def decided(self, forum: Forum) -> Source:
        """The configured source, else the record as it is (or Markdown), never probing: what a read from
        cached copies uses, the forum having just failed."""
        if forum.source != "auto":
            return SOURCES[forum.source]
        return _read_by(self.control.get(self.key(forum)))

    def refused(self, spec: FeedSpec, source: Source, exc: UpstreamError) -> UpstreamError:
        """The error for a list the forum refused: that list's own, except for the JSON probe list of a forum
        whose Markdown probe was refused too, where both answers are quoted. Nothing is changed."""
        entry: SourceEntry | None = self.control.get(self.key(spec.forum))
        if spec.forum.source != "auto" or source is not JSON or entry is None or entry.source != JSON.name \
                or entry.reason is None or (spec.list_path, spec.list_params) != (PROBE_PATH, ()):
            return exc
        message = (f"neither the Markdown nor the JSON lists of {spec.forum.key} are public "
                   f"(Markdown: {entry.reason}; JSON: {exc.message})")
        if isinstance(exc, UpstreamNotFound) and entry.status == UpstreamNotFound.status:
            return UpstreamNotFound(message, reason=exc.reason, upstream_status=exc.upstream_status)
        return UpstreamRefused(message, upstream_status=exc.upstream_status)  # refused, whatever JSON said

    @staticmethod
    def key(forum: Forum) -> str:
        return keys.source(forum.base_url)

    def _probe(self, read: Read, forum: Forum, key: str, previous: SourceEntry | None) -> SourceEntry:
        """One transition of the table in the module docstring; stores and returns the new record.

        A 429 (the forum's, or the bridge's own budget or slots) is no answer at all: the record is left as
        it was, still due, so no client can postpone a re-check by being refused. A bot wall is the forum's
        front door, not its Markdown: it keeps a decision as a 5xx does, and with none it is the feed's error
        and nothing is written (the JSON probe would only meet the same wall)."""
        inconclusive: UpstreamError
        try:
            list_page(read, forum, MARKDOWN.list_url(forum.base_url, PROBE_PATH), MARKDOWN)
            return self._store(forum, key, previous, MARKDOWN.name, settled=True)
        except (UpstreamNotFound, UpstreamRefused) as exc:
            return self._store(forum, key, previous, JSON.name, settled=True, reason=exc.message, status=exc.status)
        except (UpstreamRateLimited, BridgeBusy):
            if previous is None:
                raise
            return previous
        except (BotWall, CrawlerRefused) as exc:
            if previous is None:
                raise
            if previous.source == UNDECIDED:
                return previous
            inconclusive = exc
        except UpstreamError as exc:
            inconclusive = exc
        log.warning("%s: its Markdown probe decides nothing (%s)", forum.key, inconclusive.message)
        if previous is not None and previous.source != UNDECIDED:
            return self._store(forum, key, previous, previous.source, settled=False, reason=previous.reason,
                               status=previous.status)
        try:
            list_page(read, forum, JSON.list_url(forum.base_url, PROBE_PATH), JSON)
            state = JSON.name
        except (UpstreamRateLimited, BridgeBusy, BotWall, CrawlerRefused):
            if previous is None:
                raise
            return previous
        except UpstreamError as exc:
            log.warning("%s: its JSON probe is no list either (%s)", forum.key, exc.message)
            state = UNDECIDED
        return self._store(forum, key, previous, state, settled=False, reason=inconclusive.message)

    def _store(self, forum: Forum, key: str, previous: SourceEntry | None, state: str, *, settled: bool,
               reason: str | None = None, status: int | None = None) -> SourceEntry:
        """`settled`: the Markdown probe was conclusive, so the record holds for the whole re-check period; `key` is
        the record's (`key(forum)`, made once per probe by `source`)."""
        now = time.time()
        wait = self.settings.source_recheck if settled else min(RETRY, self.settings.source_recheck / 10)
        entry = SourceEntry(state, now, now + wait, reason, status)
        if state != UNDECIDED and (previous is None or previous.source != state):
            log.info("%s: reading its %s lists%s", forum.key, SOURCES[state].label, f" ({reason})" if reason else "")
        keep = self.settings.source_recheck + max(self.settings.stale_ttl, self.settings.cache_ttl)
        self.control.set(key, entry, keep)
        return entry

    @staticmethod
    def _due(entry: SourceEntry | None) -> bool:
        return entry is None or time.time() >= entry.due_at

    def _settled(self, key: str) -> SourceEntry | None:
        entry: SourceEntry | None = self.control.get(key)
        return None if self._due(entry) else entry


def _read_by(entry: SourceEntry | None) -> Source:
    return MARKDOWN if entry is None else SOURCES.get(entry.source, MARKDOWN)
