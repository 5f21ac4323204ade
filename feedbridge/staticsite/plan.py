"""The `feedbridge build --config` file: which feeds to write, from which forums, and how politely.

A feed is named like a web-service feed path (`c/compiler/5`, `u/smth`, `latest` + `q`), and every feed is
turned into `FeedSpec`s by `spec.parse_feed_request`, so the static and web modes share one set of
routes, validation and SSRF rules. Everything is checked before anything is fetched; a mistake is
reported as `FILE:LINE: message`, with the line of the offending table or key found in the text
(`staticsite.lines`), because tomllib only gives positions for syntax errors.
"""

from __future__ import annotations

import os
import re
import reprlib
import tempfile
import tomllib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from feedbridge.config import Credential, Forum, Settings, parse_credential, parse_forum
from feedbridge.discourse.listing import parse_listing
from feedbridge.errors import BuildConfigError, ConfigError, NoBaseURL, NotAListError, RequestError, SavedFileError
from feedbridge.feeds.request import params
from feedbridge.feeds.request.spec import FeedSpec, feed_kind_of, parse_feed_request
from feedbridge.feeds.request.urls import NoFeed, feed_for_url
from feedbridge.feeds.sources.dialects import lacks_of
from feedbridge.feeds.sources.reads import saved_pages
from feedbridge.render.formats import FEED_FORMATS
from feedbridge.staticsite.lines import Lines
from feedbridge.staticsite.saved import read_saved

DEFAULT_FORUM = "https://dev-discuss.pytorch.org"
# Keys of a feed that become feed-URL parameters, exactly as the web service names them: the table's
# (`feeds/request/params.py`), each a string, a whole number or true/false as its value is, a list where it is many.
PARAMS = tuple(name for name, row in params.NAMED.items() if row.static)
DEFAULTABLE = ("forum", "formats", "pages", "limit", "content")
_FEED_KEYS = ("name", "file", "path", "source", "forum", "formats", "credential", *PARAMS)
_TOP_KEYS = ("title", "site_url", "out_dir", "fetch", "defaults", "feeds")
# [fetch]: (lowest, highest, default). Requests at once per forum, seconds between two requests to one
# forum, and the longest Retry-After worth waiting for (longer: that forum's feeds fail for this run).
_FETCH = {"concurrency": (1, 8, 2), "delay": (0, 60, 0.5), "max_wait": (0, 3600, 30)}
# One or more path segments of letters, digits, `_ . -`, none starting with a dot: no `..`, no hidden
# files, no absolute paths, nothing a static host treats specially. None is a name Windows gives a device
# (`con.atom` is the console, whatever its extension) or ends in a dot (Windows drops it: `a./` is `a/`).
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
_UNPORTABLE = re.compile(r"(?i)(?:con|prn|aux|nul|com[0-9]|lpt[0-9])(?:\..*)?|.*\.")
_FEED_EXTENSION = re.compile(r"\.(?:md|atom|rss|json)$")
# What the build writes besides the feeds (staticsite/build.py `_write_site`): no feed may take their names.
SITE_FILES = ("index.html", "feeds.opml")
# Bytes of one part of an output path (with its extension) and of the whole path inside the output folder:
# under the 255 of common file systems and well under PATH_MAX with the folder in front.
MAX_PART, MAX_PATH, MAX_FOLDERS = 200, 1000, 16  # a thousand feeds 496 folders deep took 12 s to check
MAX_NAME = 200  # characters of a feed's name, which progress lines and the JSON summary show
# Keys naming a file or folder: a NUL cannot be in a path at all.
_PATH_KEYS = ("out_dir", "source", "file", "path")
# Bytes of the config file: thousands of feeds, and a bound on what is read and scanned for lines.
MAX_CONFIG_BYTES = 1 << 20
# Where two output names that differ only in case are one file or folder, and a built folder may be copied.
_FOLDING = "differ only in case, and are one name on macOS and Windows"


@dataclass(frozen=True, slots=True)
class FeedPlan:
    """One configured feed: a spec per format, and the output file of each."""

    name: str
    specs: tuple[FeedSpec, ...]
    files: tuple[str, ...]  # relative to the output folder, one per spec
    saved_list: str | None = None  # the local file (the config's `source =`) that stands in for the list, if any
    signed: bool = False  # read with the forum's key (`credential =`), in the private scope
    # The saved list's text by the upstream URLs it stands for: this feed's own, read by it alone (`build.py`)
    local_pages: Mapping[str, str] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return self.specs[0].title

    @property
    def html_url(self) -> str:
        return self.specs[0].html_url


@dataclass(frozen=True, slots=True)
class BuildConfig:
    path: Path
    title: str
    site_url: str  # ends with "/"
    out_dir: Path
    feeds: tuple[FeedPlan, ...]
    settings: Settings
    concurrency: int = 2
    delay: float = 0.5
    max_wait: float = 30.0


def _shown(value: object) -> str:
    """A config value in a message, at most a line of it: TOML's dotted keys nest tables 2,000 deep, whose
    `repr` raised RecursionError (a traceback, exit 1, for a config error); a 4,301-digit integer, ValueError."""
    try:
        return reprlib.repr(value)
    except ValueError:
        return "a number too long to show"


def load_build_config(path: Path, out_dir: Path | None = None) -> BuildConfig:
    """Read and check the whole file; raises BuildConfigError (with a line when one can be found)."""
    try:
        text = read_saved(path, MAX_CONFIG_BYTES, "the config", "the most a config file may be").decode("utf-8")
    except SavedFileError as exc:
        raise BuildConfigError(exc.message) from None
    except UnicodeDecodeError as exc:
        raise BuildConfigError(f"cannot read the config: {exc}") from None
    try:
        data = tomllib.loads(text)
    except RecursionError:  # tomllib reads nested arrays and inline tables by recursion
        raise BuildConfigError("cannot read the config: arrays or inline tables nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)  # Python 3.14 has it; before, only the message does
        match = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        if line is None and match:
            line = int(match[1])
        elif line is None and "end of document" in str(exc):
            line = max(len(text.splitlines()), 1)
        message = re.sub(r"\s*\(at line \d+, column (\d+)\)", r" (column \1)", str(exc))
        raise BuildConfigError(message.replace(" (at end of document)", " at the end of the file"), line) from None
    except ValueError as exc:  # a decimal integer of over 4,300 digits (sys.get_int_max_str_digits)
        raise BuildConfigError(f"cannot read the config: {exc}") from None
    return _Checker(path, Lines(text)).config(data, out_dir)


def _unprintable(text: str) -> bool:
    """A control, format or private-use character, or a line or paragraph separator: not for one line."""
    return any(unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp") for c in text)


class _Checker:
    def __init__(self, path: Path, lines: Lines):
        self.path = path
        self.lines = lines
        self.environment = Settings()
        self.defaults: dict[str, Any] = {}
        self.raw_feeds: list[dict[str, Any]] = []

    def settings(self, forums: tuple[Forum, ...], **fixed: Any) -> Settings:
        """The environment's settings (FEEDBRIDGE_CONTACT_URL, timeouts, bounds) for the config's forums, whose keys
        are the config's (`Settings.for_run`)."""
        return self.environment.for_run(forums, **fixed)

    def out_dir(self, out_dir: Path, what: str) -> None:
        """The output folder can be written, checked before anything is fetched: no control character in its
        name, a folder where it exists, else a folder as its nearest existing parent, and a file can be made
        there (a probe that leaves no name behind)."""
        key = "out_dir" if what == "out_dir" else None
        text = str(out_dir)
        if any(unicodedata.category(c) == "Cc" for c in text):
            raise self.fail(f"{what} {text!r} has a control character", key=key)
        existing = out_dir
        try:  # a link to nowhere is no folder to make: it stops the walk, and is refused below
            while not existing.exists() and not existing.is_symlink() and existing.parent != existing:
                existing = existing.parent
        except OSError as exc:  # a name too long, a folder that cannot be searched
            raise self.fail(f"{what} {text[:80]!r}: {exc.strerror or exc}", key=key) from None
        if not existing.is_dir():
            which = "is" if existing == out_dir else f"would be made in {str(existing)!r}, which is"
            raise self.fail(f"{what} {text!r} {which} not a folder", key=key)
        try:
            with tempfile.TemporaryFile(dir=existing):
                pass
        except OSError as exc:
            raise self.fail(f"{what} {text!r}: cannot write in {str(existing)!r}: {exc.strerror or exc}",
                            key=key) from None

    def site_url(self, data: dict[str, Any]) -> str:
        """The URL the output folder is published at, which every feed's own link is made from: a plain
        http(s) URL, so that a link made from it is the file's address (`urljoin` drops a query or fragment,
        and a space or control character makes no URL)."""
        value = self.string(data, "site_url", "")
        if value is None or not re.match(r"https?://[^/?#\s]+", value):
            raise self.fail("site_url is required: the http(s) URL the output folder is published at "
                            "(feeds link to themselves with it)", key="site_url")
        try:
            parts = urlsplit(value)
            plain = bool(parts.hostname) and not (parts.query or parts.fragment or "@" in parts.netloc)
            parts.port  # noqa: B018 (ValueError for a port that is not one: `:abc`, `:99999`)
        except ValueError:
            plain = False
        if not plain or value.endswith(("?", "#")) or any(
                c.isspace() or unicodedata.category(c)[0] == "C" for c in value):
            raise self.fail(f"site_url {value[:80]!r} must be a plain http(s) URL: no space, control character, "
                            "query, fragment or user", key="site_url")
        return value

    def fail(self, message: str, table: str = "", index: int = 0, key: str | None = None) -> BuildConfigError:
        if table == "feeds" and key in self.defaults and key not in self.raw_feeds[index]:
            table, index = "defaults", 0  # the feed's value is the default's: point at that
        return BuildConfigError(message, self.lines.of(table, index, key))

    def config(self, data: dict[str, Any], out_dir: Path | None) -> BuildConfig:
        try:  # but what only the web service reads (its keys, signing, members' feeds): the web's to check
            self.environment = Settings.from_env(web=False)
        except ConfigError as exc:
            raise BuildConfigError(f"the environment: {exc}") from None
        self.unknown(data, _TOP_KEYS, "")
        site_url = self.site_url(data)
        title = self.string(data, "title", "")
        if title and _unprintable(title):
            raise self.fail(f"title {title[:40]!r} has a control or invisible character", key="title")
        fetch = self.table(data, "fetch")
        self.unknown(fetch, tuple(_FETCH), "fetch")
        for key, (low, high, _default) in _FETCH.items():
            self.number(fetch, key, low, high)
        defaults = self.table(data, "defaults")
        self.unknown(defaults, DEFAULTABLE, "defaults")
        raw_feeds = data.get("feeds")
        if isinstance(raw_feeds, dict):  # `[feeds]` or `[feeds.NAME]`: one table, not one per feed
            raise self.fail("feeds must be one [[feeds]] table per feed (or feeds = [{...}, ...]), not a [feeds] "
                            "table", key="feeds")
        if not isinstance(raw_feeds, list) or not raw_feeds:
            raise self.fail("no feeds: add at least one [[feeds]] table", key="feeds")
        for raw in raw_feeds:
            if not isinstance(raw, dict):
                raise self.fail(f"every feed is a table ([[feeds]] or {{...}}), not {type(raw).__name__}",
                                key="feeds")
        self.defaults, self.raw_feeds = defaults, raw_feeds
        what = "--out-dir" if out_dir is not None else "out_dir"
        if out_dir is None:
            folder = self.string(data, "out_dir", "")
            if folder == "":
                raise self.fail("out_dir is empty: name a folder, or leave it out for 'public'", key="out_dir")
            out_dir = self.path.parent / (folder or "public")
        self.out_dir(out_dir, what)
        feeds, credentials = self.feeds(raw_feeds, defaults, self.path.parent)
        settings = self.settings(
            tuple(dict.fromkeys(plan.specs[0].forum for plan in feeds)),
            credentials=tuple(credentials.values()),
            # One store per run: a page cached at all was fetched in this run, so it stays fresh for the
            # whole run and every feed that lists it shares the one fetch.
            cache_ttl=24 * 3600,
            # Waiters on a shared page wait for its fetcher, which may sit out a Retry-After first.
            singleflight_wait=600.0,
        )
        return BuildConfig(
            path=self.path,
            title=title or "Feeds",
            site_url=site_url.rstrip("/") + "/",
            out_dir=out_dir,
            feeds=tuple(feeds),
            settings=settings,
            concurrency=int(fetch.get("concurrency", _FETCH["concurrency"][2])),
            delay=float(fetch.get("delay", _FETCH["delay"][2])),
            max_wait=float(fetch.get("max_wait", _FETCH["max_wait"][2])),
        )

    def feeds(self, raw_feeds: list[dict[str, Any]], defaults: dict[str, Any],
              base: Path) -> tuple[list[FeedPlan], dict[str, Credential]]:
        default_forum = self.forum(defaults.get("forum", DEFAULT_FORUM), "defaults", 0)
        plans: list[FeedPlan] = []
        names: set[str] = set()
        credentials: dict[str, Credential] = {}
        # Case-folded output file -> (the file as named, who writes it); folder -> (as named, a feed writing into it)
        by_file: dict[str, tuple[str, str]] = {name.casefold(): (name, "the site") for name in SITE_FILES}
        folders: dict[str, tuple[str, str]] = {}
        for index, raw in enumerate(raw_feeds):
            self.unknown(raw, _FEED_KEYS, "feeds", index)
            item = {**defaults, **raw}
            name = self.string(item, "name", "feeds", index)
            if not name:
                raise self.fail("every feed needs a name", "feeds", index, "name")
            self.name(name, names, index)
            names.add(name)
            forum = self.forum(raw["forum"], "feeds", index) if "forum" in raw else default_forum
            source = self.string(item, "source", "feeds", index)
            if source is not None:  # one page of excerpts: the defaults' pages and content are the live feeds'
                item = {key: value for key, value in item.items() if key in raw or key not in ("pages", "content")}
                text, forum, path, listed, lacks = self.local_list(base / source, item, forum, index)
                item = {**listed, **item}
            else:
                path = self.string(item, "path", "feeds", index) or ""
                if not path:
                    raise self.fail(f"feed {name!r} needs a path (like 'c/compiler/5') or a source file",
                                    "feeds", index)
            plan = self.plan(index, item, name, forum, _FEED_EXTENSION.sub("", path.strip("/")))
            if source is not None:
                self.offline(plan.specs[0], name, index, lacks)
                plan = FeedPlan(plan.name, plan.specs, plan.files, source, local_pages=saved_pages(plan.specs[0], text))
            if "credential" in raw:
                credential = self.credential(raw, forum, index, credentials.get(forum.key))
                credentials[forum.key] = credential
                plan = replace(plan, signed=True)
            self.outputs(plan, index, "file" if "file" in item else "name", by_file, folders)
            plans.append(plan)
        return plans, credentials

    def outputs(self, plan: FeedPlan, index: int, key: str, by_file: dict[str, tuple[str, str]],
                folders: dict[str, tuple[str, str]]) -> None:
        """No two feeds write one file, nor one a file where another needs a folder (or the site writes
        index.html and feeds.opml), with names compared case-folded: a built folder may be copied to or
        served from a file system that does not tell `Compiler.atom` from `compiler.atom`. The error names
        both feeds and the line of each."""
        name = plan.name
        who = f"feed {name!r} (line {line})" if (line := self.lines.of("feeds", index, key)) else f"feed {name!r}"
        for file in plan.files:
            if (known := by_file.get(file.casefold())) and known[0] == file:
                raise self.fail(f"{known[1]} and feed {name!r} both write {file}", "feeds", index, key)
            if known:
                raise self.fail(f"{known[1]} writes {known[0]} and feed {name!r} writes {file}: they {_FOLDING}",
                                "feeds", index, key)
            if known := folders.get(file.casefold()):
                folding = "" if known[0] == file else f" ({known[0]}/ and {file} {_FOLDING})"
                raise self.fail(f"feed {name!r} writes {file}, which {known[1]} needs as a folder{folding}",
                                "feeds", index, key)
            parts = file.split("/")
            for folder in ("/".join(parts[:end]) for end in range(1, len(parts))):
                if known := by_file.get(folder.casefold()):
                    folding = "" if known[0] == folder else f" ({folder}/ and {known[0]} {_FOLDING})"
                    raise self.fail(f"feed {name!r} writes into {folder}/ as a folder, but {known[1]} writes "
                                    f"{known[0]} as a file{folding}", "feeds", index, key)
                known = folders.setdefault(folder.casefold(), (folder, who))
                if known[0] != folder:
                    raise self.fail(f"{known[1]} writes into {known[0]}/ and feed {name!r} into {folder}/: they "
                                    f"{_FOLDING}", "feeds", index, key)
            by_file[file.casefold()] = (file, who)

    def name(self, name: str, taken: set[str], index: int) -> None:
        """A feed's name is shown on a line of its own (progress, cron mail, the JSON summary): one line, of
        printable characters, not too long to read, and one feed's alone."""
        if _unprintable(name):
            raise self.fail(f"feed name {name!r} has a control or invisible character", "feeds", index, "name")
        if len(name) > MAX_NAME:
            raise self.fail(f"feed name {name[:40]!r}… is longer than {MAX_NAME} characters", "feeds", index, "name")
        if name in taken:
            raise self.fail(f"two feeds are named {name!r}; each feed needs a name of its own", "feeds", index,
                            "name")

    def credential(self, raw: dict[str, Any], forum: Forum, index: int, known: Credential | None) -> Credential:
        """The key named by `credential = "VARIABLE"`, read from the environment (never from the file);
        errors name the variable, never its value. One forum, one key: feeds read with two would mix
        what two users see."""
        name = self.string(raw, "credential", "feeds", index) or ""
        if "source" in raw:
            raise self.fail("a feed built from a source file reads nothing: it takes no credential", "feeds",
                            index, "credential")
        value = os.environ.get(name) if name else None
        if not value:
            raise self.fail(f"credential {name!r}: no such environment variable is set (it holds "
                            "user-api-key:KEY or api-key:USERNAME:KEY)", "feeds", index, "credential")
        try:
            credential = parse_credential(value, forum.key, what=f"credential {name!r}")
        except ConfigError as exc:
            raise self.fail(exc.message, "feeds", index, "credential") from None
        if known is not None and known != credential:
            raise self.fail(f"credential {name!r}: another feed reads {forum.key} with another key; one key per "
                            "forum", "feeds", index, "credential")
        return credential

    def plan(self, index: int, item: dict[str, Any], name: str, forum: Forum, path: str) -> FeedPlan:
        stem = self.string(item, "file", "feeds", index)
        if stem == "":
            raise self.fail("file is empty: give an output name, or leave file out to use the feed's name", "feeds",
                            index, "file")
        stem = stem or name
        if not _SAFE_NAME.fullmatch(stem) or any(map(_UNPORTABLE.fullmatch, stem.split("/"))):
            raise self.fail(f"output name {stem!r} is not a plain relative name inside the output folder "
                            "(letters, digits, _ . - and / between parts; no '..', no leading '/' or '.', no part "
                            "ending in '.' or named as a Windows device: con, nul, com1, ...)"
                            + ("" if "file" in item else "; give the feed a file"),
                            "feeds", index, "file" if "file" in item else "name")
        longest = max((part for fmt in FEED_FORMATS for part in f"{stem}.{fmt}".split("/")), key=len)
        if len(longest) > MAX_PART or len(stem) + 5 > MAX_PATH or stem.count("/") > MAX_FOLDERS:
            raise self.fail(f"output name {stem[:40]!r}… is too long: at most {MAX_PART} characters a part, with "
                            f"its extension, {MAX_PATH} in all, {MAX_FOLDERS} folders deep", "feeds", index,
                            "file" if "file" in item else "name")
        formats = item.get("formats", list(FEED_FORMATS))
        if (not isinstance(formats, list) or not formats or not all(isinstance(f, str) for f in formats)
                or len(set(formats)) != len(formats) or not set(formats) <= set(FEED_FORMATS)):
            raise self.fail(f"formats must be a list of some of {', '.join(FEED_FORMATS)}", "feeds", index,
                            "formats" if "formats" in item else None)
        kind = feed_kind_of(path)  # a default is the feeds' that take it: `content = "full"` beside a /t/ feed
        args = {key: self.values(item, key, index) for key in PARAMS
                if key in item and (key in self.raw_feeds[index] or kind in params.NAMED[key].feeds)}
        specs = []
        for fmt in formats:
            try:
                specs.append(parse_feed_request(self.settings((forum,)), f"{forum.key}/{path}.{fmt}", args))
            except RequestError as exc:
                raise self.fail(f"feed {name!r}: {exc.message}", "feeds", index,
                                exc.param if exc.param in args else "path") from None
        return FeedPlan(name, tuple(specs), tuple(f"{stem}.{fmt}" for fmt in formats))

    def local_list(self, file: Path, item: dict[str, Any], forum: Forum,
                   index: int) -> tuple[str, Forum, str, dict[str, Any], frozenset[str]]:
        """The file's text, the forum and feed path it is a copy of (from its `**URL:**` line, read as the
        front page reads a pasted URL), what that URL's query says of the feed (a top list's `period`), and the
        `Topic` fields the list leaves out (`lacks_of`: an older dialect's reply counts too). The forum is read
        as Markdown, with no detection, which would ask the forum for a page the offline build means not to fetch."""
        if item.get("pages", 1) != 1:
            raise self.fail("a source file is one page: pages must be 1", "feeds", index, "pages")
        try:
            text = read_saved(file, self.environment.max_body_bytes).decode("utf-8")
        except SavedFileError as exc:
            raise self.fail(f"source: {exc.message}", "feeds", index, "source") from None
        except UnicodeDecodeError as exc:
            raise self.fail(f"cannot read source {str(file)!r}: {exc}", "feeds", index, "source") from None
        explicit = "path" in item
        try:
            listing = parse_listing(text, base_url=forum.base_url if explicit else None)
        except NotAListError as exc:
            hint = " (give its path and forum)" if isinstance(exc, NoBaseURL) and not explicit else ""
            raise self.fail(f"source {str(file)!r}: {exc}{hint}", "feeds", index, "source") from None
        if explicit:
            path = self.string(item, "path", "feeds", index) or ""
            return text, replace(forum, source="markdown"), path, {}, lacks_of(listing)
        forum = self.forum(listing.base_url, "feeds", index, "source")
        found = feed_for_url(self.settings((forum,)), listing.url or forum.base_url)
        if isinstance(found, NoFeed):
            raise self.fail(f"source {str(file)!r}: {found.message} (give its path)", "feeds", index, "source")
        listed = {key: int(value) if params.NAMED[key].numeric and len(value) <= 18 else value  # else refused as text
                  for key, value in found.params if key in PARAMS}
        return text, replace(forum, source="markdown"), found.path, listed, lacks_of(listing)

    def offline(self, spec: FeedSpec, name: str, index: int, lacks: frozenset[str]) -> None:
        """A feed built from a source file reads nothing else, and a Markdown list carries no likes, views,
        tags or category ids: a parameter that needs them would read the forum (its JSON list, topic pages,
        directory) or filter on nothing, so it is refused here, by name; so is `content = "full"` (each topic's
        page), and a `path` whose feed reads other lists than one Markdown page (a user's own list, /filter, a
        tag intersection, posts): each read the forum, where the file was to stand in for it."""
        if spec.kind in ("user_topics", "filter", "topic_posts", "posts", "user_posts") or spec.intersection:
            raise self.fail(f"feed {name!r}: a source file stands in for one page of a Markdown topic list, and a "
                            f"{spec.kind.replace('_', ' ')} feed reads the forum's other lists", "feeds", index, "path")
        if spec.content != "excerpt":
            raise self.fail(f"feed {name!r}: content = {spec.content!r} reads each topic's page from the forum, "
                            "which a source file stands in for; give the feed a path instead", "feeds", index,
                            "content")
        if (lacking := spec.filter.json_needed(lacks)) is not None:
            raise self.fail(f"feed {name!r}: {lacking} needs what this saved Markdown list does not carry (likes, "
                            "views, tags, category ids, or an older dialect's reply counts); give the feed a path "
                            "to read the forum instead", "feeds", index, lacking)

    # typed access
    def unknown(self, table: dict[str, Any], allowed: tuple[str, ...], name: str, index: int = 0) -> None:
        for key in table:
            if key not in allowed:
                where = f"[{name}]" if name else "the top level"
                raise self.fail(f"unknown key {key!r} in {where}; expected one of {', '.join(allowed)}",
                                name, index, key)

    def table(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(f"{key} must be a table ([{key}])", key=key)
        return value

    def string(self, data: dict[str, Any], key: str, table: str, index: int = 0) -> str | None:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(f"{key} must be a string, not {type(value).__name__}", table, index, key)
        if value is not None and key in _PATH_KEYS and "\x00" in value:
            raise self.fail(f"{key} {value!r} has a NUL character, which no file name can have", table, index, key)
        return value

    def number(self, data: dict[str, Any], key: str, low: float, high: float) -> None:
        value, whole = data.get(key, low), key == "concurrency"
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) or not low <= value <= high:
            kind = "a whole number" if whole else "a number"
            raise self.fail(f"{key} must be {kind} from {low} to {high}, not {_shown(value)}", "fetch", 0, key)

    def values(self, item: dict[str, Any], key: str, index: int) -> list[str]:
        """A feed parameter as the web service receives it: a list of strings."""
        value, param = item[key], params.NAMED[key]
        items = value if isinstance(value, list) and param.many else [value]
        if param.value == "flag":  # `true` is the feed parameter's 1
            if not isinstance(value, bool):
                raise self.fail(f"{key} must be true or false, not {_shown(value)}", "feeds", index, key)
            return ["1" if value else "0"]
        ok = all(isinstance(v, int) and not isinstance(v, bool) and v.bit_length() < 64 if param.numeric
                 else isinstance(v, str) for v in items)
        kind = ("a whole number" + (" or a list of them" if param.many else "") if param.numeric
                else "a string" + (" or a list of strings" if param.many else ""))
        if not ok:
            raise self.fail(f"{key} must be {kind}, not {_shown(value)}", "feeds", index, key)
        return [str(v) for v in items]

    def forum(self, value: Any, table: str, index: int, key: str = "forum") -> Forum:
        if not isinstance(value, str):
            raise self.fail(f"forum must be a string URL, not {_shown(value)}", table, index, key)
        try:
            return parse_forum(value)
        except ConfigError as exc:
            raise self.fail(exc.detail, table, index, key) from None
