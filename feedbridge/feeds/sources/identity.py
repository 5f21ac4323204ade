"""How each forum presents itself (`/site/basic-info.json`): the icon, logo, title and language its feeds carry.

Read once per forum and kept like the categories directory (`feeds/sources/directory.py`), in the store, by forum: any
copy held will do (a forum's logo and language change rarely), so it costs the forum one request per stale TTL
(FEEDBRIDGE_STALE_TTL), charged to its budget like every read (it goes through the `Gate`), and none while the
forum is failing. Failure-tolerant, since a forum without it still gets its feeds, only without an icon: a
forum that answers 404 or refuses it (a release from before it, a proxy in front), or answers something that
is no basic info, is kept as having none, for as long as a copy would be; one that fails (a timeout, a 5xx) is
asked again once its failure is forgotten (FEEDBRIDGE_NEGATIVE_TTL). A read refused by the forum's budget, a
client's share or a slot is `optional` (`feeds/admission/policy.py`): the feed goes without its icon this time, is kept
all the same, and never waits for the window's room for an icon; the next build asks again.

It is read in the public scope whatever the request's (`Identities.of`): every forum shows it without a login,
a login-only forum too, so neither the forum's key nor a member's is sent for it, nor is it kept once per key
or per member.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from feedbridge.config import Forum
from feedbridge.discourse.site_info import parse_basic_info
from feedbridge.errors import NoForumAnswer, NotHeld, UpstreamNotFound, UpstreamRefused
from feedbridge.feeds.sources.reads import Read, Scope
from feedbridge.models import Site
from feedbridge.store import keys
from feedbridge.store.entries import SiteEntry

log = logging.getLogger(__name__)

PATH = "/site/basic-info.json"


@dataclass(frozen=True, slots=True)
class Identities:
    """The forums' identities, read in `public`, the public scope (see the module docstring)."""

    public: Scope

    def of(self, read: Read, forum: Forum) -> Site | None:
        """The forum's `Site`: the copy held, else read now (live or from cached copies only, as `read` is,
        in the public scope); None when it has none or cannot give it now."""
        public = Read(self.public, read.caller, read.cached_only, read.building)

        def fetch(_held: SiteEntry | None, public: Read) -> SiteEntry:
            url = forum.base_url + PATH
            try:
                text = public.fetch(forum, url, url).text
            except (UpstreamNotFound, UpstreamRefused) as exc:
                log.info("%s gives no basic info: %s", forum.key, exc.message)
                return SiteEntry(None, time.time())
            return SiteEntry(parse_basic_info(text, forum.base_url), time.time())

        try:
            entry: SiteEntry = public.optional().entry(keys.site(forum.base_url), fetch,
                                                       f"the basic info of {forum.key}", forum, any_copy=True)
        except (NoForumAnswer, NotHeld) as exc:  # NotHeld: read from cached copies, and none is held
            log.info("feeds of %s go without its icon for now: %s", forum.key, exc.message)
            return None
        return entry.site
