"""From any forum URL a person may paste (or a saved list names) to the feed that serves it best.

The one converter of forum URLs into feed paths: the front page's paste box (`web/feedform.py`),
`feedbridge build SOURCE` (`cli.py`) and a static build's `source =` file (`staticsite/plan.py`) all ask
this module, so a URL names the same feed everywhere. Pure: it never fetches. What it returns is a feed
path and parameters in the shape feed readers send, which `spec.parse_feed_request` (the one validation
boundary) still checks, so a shape it accepts here can never reach upstream unchecked.

Discourse's own paths are the specification (core: config/routes.rb): a category's `/c/*slugs/ID` with
its `/l/FILTER` and `/l/top/PERIOD` views, `/tag/NAME[/ID]`, `/tags/c/*slugs/ID/NAME`,
`/tags/intersection/A/B`, `/u/NAME` with `/summary` and `/activity[/FILTER]`, `/topics/created-by/NAME`,
`/t/SLUG/ID[/POST]`, `/top[/PERIOD]`, `/search?q=` (the latest feed with the same `q=`, the bridge's keyword query,
not the forum's search), `/filter?q=`. Each pattern is flat (no nested quantifiers): the paths are outside text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

import idna

from feedbridge.config import Forum, Settings, ascii_netloc
from feedbridge.feeds.request.params import TOP_PERIODS, FeedKind, Marked, fullmatch
from feedbridge.feeds.request.spec import (
    CATEGORY_VALUE,
    MAX_INTERSECTION,
    SLUG,
    feed_kind_of,
    keyword_param,
    kind_of,
    split_forum,
)

_USER = r"(?P<user>\w[\w.-]{0,59})"  # core's UsernameValidator: a letter, digit or `_` first
# A topic's page, with a post's number or `last` after it: core routes `t/:topic_id/:post_number` before
# `t/:slug/:topic_id` (config/routes.rb), so two numbers are the topic and a post of it, never a slug and a topic.
_TOPIC_PATH = re.compile(rf"t/(?:(?P<slug>{SLUG})/)?(?P<topic>[0-9]{{1,9}})(?:/[0-9]{{1,9}}|/last)?")
_TOPIC_AND_POST = re.compile(r"t/(?P<topic>[0-9]{1,9})/(?:[0-9]{1,9}|last)")
# A category with one of its views: `/l/top/PERIOD` first, so that `/l/\w` cannot take `top` alone.
_CATEGORY = re.compile(rf"c/{CATEGORY_VALUE}(?P<view>/l/top/\w{{1,20}}|/l/\w{{1,20}}|/none|/all)?")
# Core finds a category by its id alone (`Category.find_by_slug_path_with_id`, "c/5"), or its slugs alone (the
# legacy "c/compiler"), and redirects to its whole path: the bridge, which never fetches here, cannot.
_CATEGORY_ID = re.compile(r"c/(?P<id>[0-9]{1,9})(?:/l/latest|/none|/all)?")
_CATEGORY_SLUGS = re.compile(rf"c/(?P<slugs>{SLUG}(?:/{SLUG})?(?:/{SLUG})?)(?:/l/\w{{1,20}}|/none|/all)?")
_TAG = re.compile(rf"tags?/(?P<tag>{SLUG})(?:/(?P<id>[0-9]{{1,9}}))?(?:/l/\w{{1,20}})?")
_TAG_IN_CATEGORY = re.compile(rf"tags/c/{CATEGORY_VALUE}/(?P<tag>{SLUG})(?:/l/\w{{1,20}})?")
_INTERSECTION = re.compile(rf"tags/intersection/(?P<tags>{SLUG}(?:/{SLUG}){{1,{MAX_INTERSECTION - 1}}})")
_USER_TOPICS = re.compile(rf"(?:topics/created-by/|u/){_USER}(?:/summary|/activity/topics)?")
_USER_POSTS = re.compile(rf"u/{_USER}/(?:activity|activity/replies|activity/posts|posts)")
_USER_OTHER = re.compile(rf"u/{_USER}/[\w/-]{{1,100}}")
_TOP = re.compile(r"top(?:/(?P<period>\w{1,20}))?")
_SUFFIX = re.compile(r"\.(?:md|json|rss)$")
_LATEST = ("", "latest", "new", "unread", "categories")


def _joined_tags(rest: str) -> int:
    """How many tags a tag intersection's path joins (core's `/tags/intersection/a/b`, the bridge's `tag/a+b`),
    0 for any other path: one of more than a feed takes was "not recognised", where the web says why."""
    if rest.startswith("tags/intersection/"):
        return len(rest.removeprefix("tags/intersection/").split("/"))
    return len(rest.removeprefix("tag/").split("/")[0].split("+")) if rest.startswith("tag/") else 0


def _fullmatch(pattern: re.Pattern[str], text: str) -> re.Match[str] | Marked | None:
    """`params.fullmatch` for a path that may hold a combining mark; an ASCII one is matched here, no call out."""
    return pattern.fullmatch(text) if text.isascii() else fullmatch(pattern, text)


@dataclass(frozen=True, slots=True)
class FeedTarget:
    """A feed named by a forum URL: the feed path after the forum's key, without format (`c/compiler/5`,
    `u/ezyang/posts`), the parameters the URL carries (`period=`, `category=`, `q=`, `tag=`), and a
    sentence saying what the feed holds."""

    forum: Forum
    path: str
    params: tuple[tuple[str, str], ...]
    what: str

    def feed_path(self, fmt: str) -> str:
        """The feed's request path without its leading slash, as `parse_feed_request` takes it."""
        return f"{self.forum.key}/{self.path}.{fmt}"

    def request(self, fmt: str) -> tuple[str, dict[str, list[str]], FeedKind]:
        """What `parse_feed_request` is given for this feed in `fmt`: its path, its parameters, and its kind
        (which says what parameter an option given beside the URL stands for: `--query` is `keyword=` on
        /filter)."""
        return self.feed_path(fmt), self.args(), feed_kind_of(self.path) or "latest"

    def args(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for key, value in self.params:
            found.setdefault(key, []).append(value)
        return found

    @property
    def keyword(self) -> str:
        """What the bridge's keyword filter is called on this feed (`q`; `keyword` where `q` is the forum's)."""
        return keyword_param(kind_of(self.path))


@dataclass(frozen=True, slots=True)
class NoFeed:
    """Why a URL names no feed, as a sentence for the page or the command line."""

    message: str


def feed_for_url(settings: Settings, url: str) -> FeedTarget | NoFeed:
    """The feed a forum URL names on one of `settings`' forums: its scheme may be missing, a `.md`,
    `.json` or `.rss` suffix, `?page=` and a trailing slash are all ignored."""
    text = url.strip()
    if not text:
        return NoFeed("Paste the address of a forum page.")
    try:
        parts = urlsplit(text if "://" in text else "https://" + text)
    except ValueError:  # a host that NFKC-normalises to '/' or '?' ('．．／'), a broken IPv6 literal
        return NoFeed(f"{text[:80]} is not a web address.")
    hosts = _hosts(parts)
    found = next((got for name in hosts if (got := split_forum(settings, f"{name}{unquote(parts.path)}/"))), None)
    if found is None:
        served = ", ".join(f.key for f in settings.forums)
        named = hosts[0] if hosts and hosts[0] else parts.netloc.rpartition("@")[2][:80] or text[:80]
        return NoFeed(f"{named} is not a forum this bridge serves (it serves {served}).")
    forum, rest = found[0], _SUFFIX.sub("", found[1].strip("/"))
    query = {key: values[-1] for key, values in parse_qs(parts.query).items() if values}
    target = feed_of_path(forum, rest, query)
    if (target is None and (match := _fullmatch(_CATEGORY_SLUGS, rest))
            and not any(part.isdigit() for part in match["slugs"].split("/"))):
        return NoFeed(f"/c/{match['slugs'][:80]} names a category by its slug alone: open it on {forum.key} and "
                      "paste the address it shows, which ends in the category's number (/c/SLUG/ID).")
    if target is None and (joined := _joined_tags(rest)) > MAX_INTERSECTION:
        return NoFeed(f"/{rest[:80]} joins {joined} tags: a feed takes a tag, or up to {MAX_INTERSECTION} tags that "
                      "every topic has (/tags/intersection/a/b).")
    if target is None:
        return NoFeed(f"The bridge does not recognise /{rest[:80]} on {forum.key}: paste a category, tag, "
                      "latest, top, topic, user, search or filter URL.")
    return target


def _hosts(parts: SplitResult) -> list[str]:
    """The names a pasted URL's host may have among the forums' keys: as written (its user left out), and
    without its scheme's default port, or with it (`https://forum:443`, the forum configured either way), and
    without a final dot (`forum.example.`, the same host); an internationalised one in either form, Unicode
    or punycode (`bücher.example`, `xn--bcher-kva.example`: browsers copy one or the other)."""
    try:
        port = parts.port
    except ValueError:
        return []
    name = (parts.hostname or "").rstrip(".")
    names = [f"[{name}]"] if ":" in name else [name, *_idna_twin(name)]
    default = {"https": 443, "http": 80}.get(parts.scheme.lower())
    if port is not None and port != default:
        return [f"{name}:{port}" for name in names]
    return [*names, *(f"{name}:{default}" for name in names)]


def _idna_twin(name: str) -> list[str]:
    """The other form of an internationalised host name (none for a name that is not one, or not a valid one)."""
    try:
        if not name.isascii():
            return [ascii_netloc(name)]
        return [idna.decode(name)] if "xn--" in name else []
    except ValueError:
        return []


def feed_of_path(forum: Forum, rest: str, query: Mapping[str, str]) -> FeedTarget | None:
    """The feed of `rest`, a forum path after its base URL without suffix or slashes, with its query."""
    category = _category(query)
    # core's /filter without a query is its latest list
    if rest in _LATEST or (rest == "filter" and not query.get("q", "").strip()):
        return FeedTarget(forum, "latest", category, f"Latest topics on {forum.key}.")
    if rest == "posts":
        return FeedTarget(forum, "posts", category, f"Latest posts on {forum.key}.")
    if rest == "hot":
        return FeedTarget(forum, "hot", (), f"Hot topics on {forum.key}.")
    if match := _fullmatch(_TOP, rest):
        period = _top_period(match["period"], query)
        return FeedTarget(forum, "top", (("period", period),), f"Top topics ({period}) on {forum.key}.")
    if match := _fullmatch(_CATEGORY, rest):
        path = f"c/{match['slugs']}/{match['id']}"
        view = match["view"] or ""
        if view == "/l/top" or view.startswith("/l/top/"):
            period = _top_period(view.removeprefix("/l/top").removeprefix("/") or None, query)
            return FeedTarget(forum, path + "/l/top", (("period", period),),
                              f"Top topics ({period}) of category {match['slugs']}.")
        return FeedTarget(forum, path, (), f"Category {match['slugs']}.")
    if match := _fullmatch(_CATEGORY_ID, rest):  # core's /latest?category=ID lists the same topics
        return FeedTarget(forum, "latest", (("category", match["id"]),),
                          f"Latest topics of category {match['id']} on {forum.key}.")
    if match := _fullmatch(_TAG_IN_CATEGORY, rest):
        return FeedTarget(forum, f"c/{match['slugs']}/{match['id']}", (("tag", match["tag"]),),
                          f"Topics tagged {match['tag']} in category {match['slugs']}.")
    if match := _fullmatch(_INTERSECTION, rest):
        tags = match["tags"].split("/")
        return FeedTarget(forum, "tag/" + "+".join(tags), (), f"Topics tagged {' and '.join(tags)}.")
    if match := _fullmatch(_TAG, rest):
        path = f"tag/{match['tag']}" + (f"/{match['id']}" if match["id"] else "")
        return FeedTarget(forum, path, (), f"Tag {match['tag']}.")
    if match := _fullmatch(_USER_POSTS, rest):
        return FeedTarget(forum, f"u/{match['user']}/posts", (), f"Posts by {match['user']}.")
    if (match := _fullmatch(_USER_TOPICS, rest)) or (match := _fullmatch(_USER_OTHER, rest)):
        return FeedTarget(forum, f"u/{match['user']}", category, f"Topics started by {match['user']}.")
    if rest == "search" and query.get("q", "").strip():
        return FeedTarget(forum, "latest", (("q", query["q"].strip()), *category),
                          f"Latest topics on {forum.key} filtered by the bridge's keyword query (words, \"a phrase\", "
                          "OR, -exclude): Discourse's own search syntax (in:title, @user, #category) is read as "
                          "plain words.")
    if rest == "filter":
        return FeedTarget(forum, "filter", (("q", query["q"].strip()),),
                          f"Topics matching the forum's filter {query['q'].strip()[:200]}.")
    if match := _fullmatch(_TOPIC_AND_POST, rest) or _fullmatch(_TOPIC_PATH, rest):
        # The slug stays for the feed's link to the topic; the post number goes: the feed is the topic's.
        path = f"t/{match['slug']}/{match['topic']}" if match.groupdict().get("slug") else f"t/{match['topic']}"
        return FeedTarget(forum, path, (), f"The posts of topic {match['topic']}.")
    return None


def _category(query: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A list's own `category=` (core's `/latest?category=ID`), when it is an id."""
    value = query.get("category", "")
    return (("category", value),) if value.isascii() and value.isdigit() else ()


def _top_period(in_path: str | None, query: Mapping[str, str]) -> str:
    """`/top/weekly` (the legacy path) or `/top?period=weekly`; anything else is every period."""
    period = in_path or query.get("period", "all")
    return period if period in TOP_PERIODS else "all"
