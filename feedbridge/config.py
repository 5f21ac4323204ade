"""Settings from environment variables (twelve-factor: a PaaS configures the app only through them).

Each setting is one line of `Settings`: its field, its default, the variables it is read from and, for a
number, its bounds (`number`, `text`), so a default or a bound is written once and `Settings()` and
`Settings.from_env({})` cannot disagree. Every size, count and timeout that protects the service or the
forums it reads is bounded here, in one place, and docs/configuration.md's table is checked against these
fields (tests/test_docs.py), so the two cannot drift apart.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import idna

from feedbridge.errors import ConfigError, cut, shown, shown_url

SOURCE_CHOICES = ("auto", "markdown", "json")
"""How a forum's lists are read: `auto` detects it (Markdown where the forum serves it, else JSON);
`markdown` and `json` are an admin's explicit choice, and skip detection."""


@dataclass(frozen=True, slots=True)
class Forum:
    """A forum the service may fetch from. `key` is how it appears in feed paths: host[:port][/subfolder].
    `source` is one of `SOURCE_CHOICES`, written as a prefix in FEEDBRIDGE_FORUMS (`json:https://...`)."""

    base_url: str
    source: str = "auto"
    key: str = field(init=False, repr=False, compare=False)
    """Worked out once, when the forum is made: every read names its forum by it, in keys and messages."""
    # Split once: the fetcher checks each URL against every forum's (`is_within`), 0.6 ms a URL with 200 forums.
    origin: tuple[str, str] = field(init=False, repr=False, compare=False)  # scheme, host[:port], lower case
    subfolder: str = field(init=False, repr=False, compare=False)  # the path, without its final "/"

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        object.__setattr__(self, "key", parts.netloc + parts.path.rstrip("/"))
        object.__setattr__(self, "origin", (parts.scheme, ascii_netloc(parts.netloc)))
        object.__setattr__(self, "subfolder", parts.path.rstrip("/"))


def ascii_netloc(netloc: str) -> str:
    """`netloc` in lower case, its host as httpx sends it (IDNA 2008): a forum is named by it (its key, its ids),
    as core names itself in its redirects and links (`xn--bcher-kva.example`, however it was configured).
    ValueError for a host IDNA refuses."""
    host, colon, port = (lowered := netloc.lower()).partition(":")  # a host not ASCII is no IPv6 literal
    return lowered if lowered.isascii() else idna.encode(host).decode() + colon + port


def parse_forum(url: str, given: str | None = None) -> Forum:
    """A base URL, optionally prefixed with its source: `https://a.example`, `json:https://b.example`, or read
    through `given` whatever it says; an error shows it without user, password, query or fragment."""
    text = url.strip()
    source = "auto"
    prefix, colon, rest = text.partition(":")
    if colon and prefix in SOURCE_CHOICES:
        source, text = prefix, rest.strip()
    elif colon and rest.strip().startswith(("http://", "https://")):
        raise ConfigError.about("FEEDBRIDGE_FORUMS", f"{shown_url(url.strip())}: the source prefix must be one of "
                                f"{', '.join(SOURCE_CHOICES)} (as in json:https://forum.example)")
    try:
        netloc = ascii_netloc((parts := urlsplit(text)).netloc)  # ValueError: a host IDNA refuses
        hostname = parts.hostname if parts.port != 0 else None  # reading `port` refuses one that is none: 99999, abc
    except ValueError:
        hostname = None
    if not hostname or parts.scheme not in ("http", "https"):
        raise ConfigError.about("FEEDBRIDGE_FORUMS", f"{shown_url(text)} is not an http(s) base URL")
    if parts.query or parts.fragment or parts.username or parts.password or "@" in parts.netloc or \
            text.endswith(("?", "#")):
        raise ConfigError.about("FEEDBRIDGE_FORUMS", f"{shown_url(text)} must be a plain base URL "
                                "(no query, fragment or user)")
    return Forum(f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}", given or source)


DEFAULT_FORUMS = (Forum("https://dev-discuss.pytorch.org"),)
WEB_ONLY = frozenset({"FEEDBRIDGE_CREDENTIALS", "FEEDBRIDGE_SECRET", "FEEDBRIDGE_SECRET_PREVIOUS",  # keys, signing,
                      "FEEDBRIDGE_PERSONAL", "FEEDBRIDGE_CONNECT_KEY", "FEEDBRIDGE_AUTH_REDIRECTS"})  # members' feeds


@dataclass(frozen=True, slots=True)
class Credential:
    """How the bridge signs in to one forum (FEEDBRIDGE_CREDENTIALS), named by the forum's key: a User API key
    (`user-api-key:KEY`, sent as `User-Api-Key`) or an admin API key and the user it acts as (`api-key:USERNAME:KEY`,
    sent as `Api-Key` and `Api-Username`). The key is out of the repr, so nothing that shows the settings shows it."""

    host: str
    username: str | None = None  # an admin API key's user; None for a User API key
    key: str = field(default="", repr=False)

    def headers(self) -> dict[str, str]:
        if self.username is None:
            return {"User-Api-Key": self.key}
        return {"Api-Key": self.key, "Api-Username": self.username}


_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
MAX_KEY_CHARS = 200


def parse_credential(entry: str, host: str, what: str = "FEEDBRIDGE_CREDENTIALS") -> Credential:
    """`user-api-key:KEY` or `api-key:USERNAME:KEY` for the forum `host`. A ConfigError names the entry by
    `host` (and says what is wrong with it), never by its text: that holds the key."""
    kind, _, rest = entry.partition(":")
    if kind == "user-api-key":
        username, key = None, rest
    elif kind == "api-key":
        username, _, key = rest.partition(":")
        if not username or len(username) > 60 or not set(username) <= _KEY_CHARS:
            raise ConfigError(f"{what}: the entry for {host} needs a user name, as api-key:USERNAME:KEY", what)
    else:
        raise ConfigError(f"{what}: the entry for {host} must start with user-api-key: or api-key:", what)
    if not key or len(key) > MAX_KEY_CHARS or not set(key) <= _KEY_CHARS:
        raise ConfigError(f"{what}: the key in the entry for {host} is empty, too long, or has characters "
                          "no Discourse key has", what)
    return Credential(host, username, key)


_FORUM_KEY = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])"
                        r"(?::[0-9]{1,5})?(?:/[a-z0-9._~%!$&'()*+,;=:@/-]*)?", re.IGNORECASE)
"""What a forum's key (`Forum.key`, host[:port][/subfolder]) looks like: an entry's HOST is shown in an error only
when it does, since one written the wrong way round (`user-api-key:KEY=host`) has its key where the HOST is."""


def _credentials(raw: str) -> tuple[Credential, ...]:
    made: dict[str, Credential] = {}
    for number, entry in enumerate(raw.split(), 1):
        host, equals, value = entry.partition("=")
        if not equals or not host or len(host) > 300 or not _FORUM_KEY.fullmatch(host) or \
                host.startswith(("user-api-key:", "api-key:")):
            raise ConfigError(f"FEEDBRIDGE_CREDENTIALS: entry {number} must start with HOST= (a forum's key, as in "
                              "feed paths, xn--... for a name not in ASCII), as HOST=user-api-key:KEY or "
                              "HOST=api-key:USERNAME:KEY",
                              "FEEDBRIDGE_CREDENTIALS")
        if host in made:
            raise ConfigError(f"FEEDBRIDGE_CREDENTIALS: {host} has two entries", "FEEDBRIDGE_CREDENTIALS")
        made[host] = parse_credential(value, host)
    return tuple(made.values())

@dataclass(frozen=True, slots=True)
class AuthRedirect:
    """The `auth_redirect` a forum's admin allowed (`allowed_user_api_auth_redirects`) for this bridge's
    `/HOST/connect`, where the forum sends a member back with their encrypted key (FEEDBRIDGE_AUTH_REDIRECTS)."""

    host: str
    url: str

    def __str__(self) -> str:
        return f"{self.host}={self.url}"


def _auth_redirects(raw: str) -> tuple[AuthRedirect, ...]:
    """`HOST=URL` entries, one per forum (`AuthRedirect`)."""
    made: dict[str, str] = {}
    for number, entry in enumerate(raw.split(), 1):
        host, equals, url = entry.partition("=")
        if not equals or not host or host in made or len(host) > 300 or not _FORUM_KEY.fullmatch(host):
            raise ConfigError.about("FEEDBRIDGE_AUTH_REDIRECTS",
                                    f"entries are HOST=URL, one per forum, which entry {number} is not")
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = urlsplit("")
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment or \
                "@" in parts.netloc or url.endswith(("?", "#")) or not parts.path.endswith(f"/{host}/connect"):
            raise ConfigError.about("FEEDBRIDGE_AUTH_REDIRECTS", f"the URL for {host} must be this bridge's "
                                    f"http(s) address of /{host}/connect, with no query or user, not {shown_url(url)}")
        made[host] = url
    return tuple(AuthRedirect(host, url) for host, url in made.items())


T = TypeVar("T")
N = TypeVar("N", int, float)


@dataclass(frozen=True, slots=True)
class Env:
    """Where a setting is read from: its variables (the first one set and not blank wins: one set to nothing, as a
    deployment template leaves it, is unset), how its text becomes a value (a ValueError says why it cannot),
    and a number's bounds. A `secret` value is never shown in an error; a `required` one set blank is an error."""

    names: tuple[str, ...]
    read: Callable[[str], Any]
    low: float | None = None
    high: float | None = None
    secret: bool = False
    required: str | None = None

    def value(self, environ: Mapping[str, str]) -> Any | None:
        """The setting's value from `environ`, or None when none of its variables is set. An error names the
        variable the value was read from: REDIS_URL, where a Redis add-on set it, not FEEDBRIDGE_CACHE_URL."""
        name, raw = next(((name, text) for name in self.names if (text := environ.get(name)) and text.strip()),
                         (self.names[0], None))
        if raw is None:
            if self.required and any(environ.get(name) is not None for name in self.names):
                raise ConfigError(f"{self.names[0]} is set but empty: {self.required}", self.names[0])
            return None
        try:
            value = self.read(raw)
        except ConfigError:
            raise
        except ValueError as exc:
            what = "an integer" if self.read is int else "a number" if self.read is float else str(exc)
            raise ConfigError(f"{name} must be {what}" + ("" if self.secret else f", not {shown(raw)}"), name) from None
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        """A number within its bounds; a ConfigError naming the variable otherwise."""
        if self.low is not None and self.high is not None and not self.low <= value <= self.high:
            raise ConfigError(f"{self.names[0]} must be between {self.low} and {self.high}, not "
                              f"{cut(str(value))}", self.names[0])


def number(default: N, name: str, low: N, high: N, required: str | None = None) -> N:
    """A field read from the variable `name` as an int or a float (as `default` is), within [low, high]."""
    return field(default=default, metadata={"env": Env((name,), type(default), low, high, required=required)})


def text(default: T, *names: str, read: Callable[[str], T], secret: bool = False) -> T:
    """A field read from the first of `names` that is set, through `read`; a `secret` one is out of the repr."""
    return field(default=default, repr=not secret, metadata={"env": Env(names, read, secret=secret)})


def _forums(raw: str) -> tuple[Forum, ...]:
    """Two URLs of one key (`https://h`, `http://h`; a name and its punycode) would be one forum twice: refused."""
    forums: dict[str, tuple[Forum, str]] = {}  # and as written (parsed: a plain URL), as shown
    for written in raw.split():
        if (first := forums.setdefault((forum := parse_forum(written)).key, (forum, written)))[0] is not forum:
            raise ConfigError.about("FEEDBRIDGE_FORUMS", f"{first[1]} and {written} are one "
                                    f"forum to the bridge ({forum.key}): give one")
    return tuple(forum for forum, _ in forums.values())


def _redis_url(raw: str) -> str:
    """A URL of the shape redis-py reads (a host, a port that is one, a database that is a number; a unix://
    URL's path): a bad one is this line, not each worker's traceback, nor database 0 without a word (redis-py's
    `/abc`). Not read by redis-py here: imported in gunicorn's master, before the gevent worker patches `ssl`,
    it has every worker warn. Shown without its password (`shown_url`)."""
    kind = raw.partition("://")[0].lower() if "://" in raw else ""
    try:
        parts = urlsplit(raw)  # .port: a ValueError when it is no number or past 65535
        where = parts.path if kind == "unix" else parts.hostname if parts.port != 0 else None
    except ValueError:
        where = None
    if kind in ("redis", "rediss") and where and (db := parts.path.strip("/")) and not (db.isascii() and db.isdigit()):
        raise ValueError("a database number after the port (redis://HOST:PORT/0): its path is no number")
    if kind not in ("redis", "rediss", "unix") or not where:
        given = shown_url(raw) if "://" in raw else "a value without :// (not shown: it may be a password)"
        raise ValueError(f"a redis://, rediss:// or unix:// URL with a host (redis://:PASSWORD@HOST:PORT/DB), "
                         f"not {given}")
    return raw


def _contact_url(raw: str) -> str:
    """An http(s) URL of visible ASCII without spaces: it goes into every request's User-Agent header."""
    text = raw.strip()
    parts = urlsplit(text)
    if (len(text) > 200 or parts.scheme not in ("http", "https") or not parts.netloc
            or not all(33 <= ord(c) < 127 and c not in "()" for c in text)):
        raise ValueError("an http(s) URL of at most 200 visible ASCII characters, without spaces or parentheses")
    return text


def _multisite(raw: str) -> tuple[tuple[str, ...], ...]:
    """Groups of forum keys on one multisite host: whitespace between groups, `,` within one."""
    groups = tuple(tuple(dict.fromkeys(key for key in group.split(",") if key)) for group in raw.split())
    if any(len(group) < 2 for group in groups):
        raise ValueError("groups of two forums or more, each forum's key joined by ',' (a.example,b.example)")
    return groups


MAX_FILTER_TERMS = 100


def _filter_terms(raw: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`HOST=term,term`: the `/filter` keys (`assigned`) and values (`status:solved`) a forum's plugins add."""
    made: dict[str, tuple[str, ...]] = {}
    for entry in raw.split():
        host, equals, listed = entry.partition("=")
        terms = tuple(dict.fromkeys(term for term in listed.split(",") if term))
        if not equals or not host or not terms or len(terms) > MAX_FILTER_TERMS or host in made:
            raise ValueError(f"HOST=key,key:value,... once per forum (at most {MAX_FILTER_TERMS} terms), not "
                             f"{shown(entry)}")
        if not all(len(term) <= 60 and all(c.isascii() and (c.isalnum() or c in "_-:") for c in term)
                   for term in terms):
            raise ValueError(f"a term is a key (assigned) or key:value (status:solved) of letters, digits, _ and -, "
                             f"not in {shown(entry)}")
        made[host] = terms
    return tuple(made.items())


def _one_of(*choices: str) -> Callable[[str], str]:
    def read(raw: str) -> str:
        if raw not in choices:
            raise ValueError(" or ".join(repr(choice) for choice in choices))
        return raw
    return read


def _on_off(raw: str) -> bool:
    return _one_of("on", "off")(raw) == "on"


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_NETWORKS = 64


def _networks(raw: str) -> tuple[Network, ...]:
    """Addresses and CIDR networks, separated by commas (or spaces): a network with host bits set
    (`10.0.0.5/8`) is refused rather than widened, since it names more peers than its writer likely meant."""
    items = [item for item in re.split(r"[,\s]+", raw) if item]
    if not items or len(items) > MAX_NETWORKS:  # ",,," named none: every scrape a 404, without a word
        raise ValueError(f"one to {MAX_NETWORKS} addresses or networks")
    networks = []
    for item in items:
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError as exc:
            why = "its host bits are set" if "host bits set" in str(exc) else "no address or network"
            raise ValueError(f"addresses or CIDR networks separated by commas ({shown(item)}: {why})") from None
    return tuple(networks)


@dataclass(frozen=True, slots=True)
class Settings:
    # Set but blank is an error: a template's empty value would read a forum nobody asked for.
    forums: tuple[Forum, ...] = field(default=DEFAULT_FORUMS, metadata={"env": Env(
        ("FEEDBRIDGE_FORUMS",), _forums,
        required="give the forums' base URLs, or leave it unset for https://dev-discuss.pytorch.org")})
    cache_ttl: int = number(300, "FEEDBRIDGE_CACHE_TTL", 0, 7 * 24 * 3600)
    stale_ttl: int = number(24 * 3600, "FEEDBRIDGE_STALE_TTL", 0, 30 * 24 * 3600)
    cache_max_bytes: int = number(64 * 1024 * 1024, "FEEDBRIDGE_CACHE_MAX_BYTES", 256 * 1024, 1 << 34)
    # A Redis URL may hold its password (redis://:PASSWORD@host): kept out of the repr as the secrets are.
    cache_url: str | None = text(None, "FEEDBRIDGE_CACHE_URL", "REDIS_URL", read=_redis_url, secret=True)
    # Connections each process opens to Redis at most: times the workers and instances, under the plan's limit.
    redis_connections: int = number(4, "FEEDBRIDGE_REDIS_CONNECTIONS", 1, 1000)
    # At most pages_max: checked in __post_init__.
    pages_default: int = number(1, "FEEDBRIDGE_PAGES_DEFAULT", 1, 20)
    pages_max: int = number(5, "FEEDBRIDGE_PAGES_MAX", 1, 20)
    fetch_concurrency: int = number(3, "FEEDBRIDGE_FETCH_CONCURRENCY", 1, 8)
    connect_timeout: float = number(5.0, "FEEDBRIDGE_CONNECT_TIMEOUT", 0.1, 60)
    read_timeout: float = number(10.0, "FEEDBRIDGE_READ_TIMEOUT", 0.1, 120)
    total_timeout: float = number(20.0, "FEEDBRIDGE_TOTAL_TIMEOUT", 0.2, 300)
    max_body_bytes: int = number(5 * 1024 * 1024, "FEEDBRIDGE_MAX_BODY_BYTES", 1024, 64 * 1024 * 1024)
    retries: int = number(2, "FEEDBRIDGE_RETRIES", 0, 5)
    max_redirects: int = 3
    retry_after_max: int = number(3600, "FEEDBRIDGE_RETRY_AFTER_MAX", 1, 24 * 3600)
    # A web request's waits end at its deadline anyway; the static build's waiters sit out a Retry-After.
    singleflight_wait: float = number(25.0, "FEEDBRIDGE_SINGLEFLIGHT_WAIT", 0.05, 3600)
    content_default: str = text("excerpt", "FEEDBRIDGE_CONTENT", read=_one_of("excerpt", "full"))
    topic_budget: int = number(30, "FEEDBRIDGE_TOPIC_BUDGET", 0, 200)
    topic_ttl: int = number(7 * 24 * 3600, "FEEDBRIDGE_TOPIC_TTL", 60, 90 * 24 * 3600)
    # How long an `auto` forum's detected source (Markdown or JSON) is trusted before it is checked again.
    source_recheck: int = number(3600, "FEEDBRIDGE_SOURCE_RECHECK", 1, 7 * 24 * 3600)
    # Python's and gunicorn's level names alike (gunicorn's own lines follow it too).
    log_level: str = text("INFO", "FEEDBRIDGE_LOG_LEVEL",
                          read=lambda raw: _one_of("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")(raw.upper()))
    access_log: bool = text(False, "FEEDBRIDGE_ACCESS_LOG", read=_on_off)
    # One JSON object per line (feedbridge.web.logs), feedbridge's lines and gunicorn's alike.
    log_format: str = text("text", "FEEDBRIDGE_LOG_FORMAT", read=_one_of("text", "json"))
    # Prometheus' /metrics (feedbridge.metrics): off unless asked for, and answered only to these peers.
    metrics: bool = text(False, "FEEDBRIDGE_METRICS", read=_on_off)
    metrics_allow: tuple[Network, ...] = text((ipaddress.ip_network("127.0.0.1"),), "FEEDBRIDGE_METRICS_ALLOW",
                                              read=_networks)
    # Abuse bounds (feeds/admission/): remembered failures, each forum's budget, a request's deadline, cold slots.
    negative_ttl: int = number(30, "FEEDBRIDGE_NEGATIVE_TTL", 0, 3600)
    forum_budget: int = number(120, "FEEDBRIDGE_FORUM_BUDGET", 0, 100_000)
    # Core's 50 requests of an address in any 10 s (`max_reqs_per_ip_per_10_seconds`), beside 200 a minute. 0: off.
    forum_budget_10s: int = number(40, "FEEDBRIDGE_FORUM_BUDGET_10S", 0, 100_000)
    # Below worker_timeout: checked in __post_init__.
    request_deadline: float = number(25.0, "FEEDBRIDGE_REQUEST_DEADLINE", 1.0, 3600)
    worker_timeout: int = number(40, "FEEDBRIDGE_WORKER_TIMEOUT", 2, 3600)
    # Each waits on the forum with its pages and topics in memory; past it, 503 + Retry-After or the stale copy.
    cold_slots: int = number(6, "FEEDBRIDGE_COLD_SLOTS", 1, 256)
    # The server (web/gunicorn_conf.py): its port (no PaaS gives 0) and workers (gunicorn reads even a blank one).
    port: int = number(8000, "PORT", 1, 65535)
    web_concurrency: int = number(2, "WEB_CONCURRENCY", 1, 64, required="give the worker processes (1 to 64), or "
                                  "leave it unset for 2")
    # The processes that split every budget (store/control.py `Windows`), as gunicorn_conf tells each worker.
    workers: int = number(1, "FEEDBRIDGE_WORKERS", 1, 64)
    # Proxies in front whose X-Forwarded-For hop is trusted for the client's address (feedbridge.web.context).
    trusted_hops: int = number(0, "FEEDBRIDGE_TRUSTED_HOPS", 0, 5)
    # Connections of one address in a worker near capacity before its idle ones close first (web/worker.py).
    peer_connections: int = number(64, "FEEDBRIDGE_PEER_CONNECTIONS", 1, 100_000)
    # The IPv6 prefix that is one client (web/context.py): a line is given a /64 (RFC 6177). 128: each address.
    ipv6_prefix: int = number(64, "FEEDBRIDGE_IPV6_PREFIX", 16, 128)
    # Who runs this instance: a page's URL for the forums' admins, in every request's User-Agent (fetcher.user_agent).
    contact_url: str | None = text(None, "FEEDBRIDGE_CONTACT_URL", read=_contact_url)
    # Forums one multisite Discourse serves from one host: core counts an address's requests to all of them in one
    # per-IP window (lib/middleware/request_tracker.rb), so their public budgets are one (`address_of`).
    multisite: tuple[tuple[str, ...], ...] = text((), "FEEDBRIDGE_MULTISITE", read=_multisite)
    # The `/filter` keys and values a forum's plugins add to core's (feedbridge.discourse.filter_query), which
    # the bridge otherwise refuses as core would ignore them.
    filter_terms: tuple[tuple[str, tuple[str, ...]], ...] = text((), "FEEDBRIDGE_FILTER_TERMS", read=_filter_terms)
    # Private forums (feeds/request/signing.py): the bridge's keys, the secret of its feed URLs' tokens (and the one
    # before, accepted while readers move over), a budget under core's for one key (20 a minute, 2,880 a day).
    credentials: tuple[Credential, ...] = text((), "FEEDBRIDGE_CREDENTIALS", read=_credentials)
    secret: str | None = text(None, "FEEDBRIDGE_SECRET", read=str, secret=True)
    secret_previous: str | None = text(None, "FEEDBRIDGE_SECRET_PREVIOUS", read=str, secret=True)
    private_budget: int = number(15, "FEEDBRIDGE_PRIVATE_BUDGET", 1, 10_000)
    private_daily_budget: int = number(2000, "FEEDBRIDGE_PRIVATE_DAILY_BUDGET", 1, 10_000_000)
    # Personal feeds (feeds/members/): a member's User API key lives only in their feed URLs. The RSA key forums
    # encrypt it to, a connect page's lifetime, the redirects admins allowed, each member key's budget.
    personal: bool = text(False, "FEEDBRIDGE_PERSONAL", read=_on_off)
    connect_key: str | None = text(None, "FEEDBRIDGE_CONNECT_KEY", read=lambda raw: raw.replace("\\n", "\n"),
                                   secret=True)
    connect_ttl: int = number(600, "FEEDBRIDGE_CONNECT_TTL", 60, 3600)
    auth_redirects: tuple[AuthRedirect, ...] = text((), "FEEDBRIDGE_AUTH_REDIRECTS", read=_auth_redirects)
    member_budget: int = number(15, "FEEDBRIDGE_MEMBER_BUDGET", 1, 10_000)
    member_daily_budget: int = number(2000, "FEEDBRIDGE_MEMBER_DAILY_BUDGET", 1, 10_000_000)
    # Seconds of a worker's CPU a client may spend a minute on builds that ask no forum (web/allowance.py). 0: off.
    cpu_allowance: float = number(20.0, "FEEDBRIDGE_CPU_ALLOWANCE", 0.0, 3600.0)

    def __post_init__(self) -> None:
        """Every number within its bounds and the settings consistent, however they were made (the environment,
        a static build's config, code: a bound checked only on reading the environment let a build wait 600 s)."""
        for f in fields(self):
            if (env := f.metadata.get("env")) is not None:
                env.check(getattr(self, f.name))
        if self.pages_default > self.pages_max:
            raise ConfigError(f"FEEDBRIDGE_PAGES_DEFAULT ({self.pages_default}) must be at most FEEDBRIDGE_PAGES_MAX "
                              f"({self.pages_max})", "FEEDBRIDGE_PAGES_DEFAULT")
        keys = [key for group in self.multisite for key in group]
        strangers = [key for key in keys if self.forum_for_key(key) is None]
        if strangers or len(keys) != len(set(keys)):
            raise ConfigError(f"FEEDBRIDGE_MULTISITE: every forum in it once, and each one of FEEDBRIDGE_FORUMS "
                              f"({cut(', '.join(f.key for f in self.forums))}), not "
                              f"{cut(', '.join(strangers)) if strangers else 'repeats'}",
                              "FEEDBRIDGE_MULTISITE")
        if strangers := [host for host, _ in self.filter_terms if self.forum_for_key(host) is None]:
            raise ConfigError(f"FEEDBRIDGE_FILTER_TERMS: {cut(', '.join(strangers))} is not a forum of "
                              "FEEDBRIDGE_FORUMS", "FEEDBRIDGE_FILTER_TERMS")
        if self.request_deadline >= self.worker_timeout:
            # Past the worker timeout gunicorn kills the worker mid-request: every request on it gets nothing.
            raise ConfigError(f"FEEDBRIDGE_REQUEST_DEADLINE ({self.request_deadline:g}) must be below "
                              f"FEEDBRIDGE_WORKER_TIMEOUT ({self.worker_timeout}), so a slow forum gives an "
                              "answer, not a killed worker", "FEEDBRIDGE_REQUEST_DEADLINE")

    def auth_redirect_for(self, forum: Forum) -> str | None:
        return next((r.url for r in self.auth_redirects if r.host == forum.key), None)

    def credential_for(self, forum: Forum) -> Credential | None:
        return next((c for c in self.credentials if c.host == forum.key), None)

    def address_of(self, forum: Forum) -> str:
        """What the forum's per-address windows are counted under: its multisite group's first forum, else
        its own key (`multisite`)."""
        return next((group[0] for group in self.multisite if forum.key in group), forum.key)

    def filter_terms_for(self, forum: Forum) -> frozenset[str]:
        """The `/filter` keys and `key:value` terms the forum's plugins add (`filter_terms`)."""
        return frozenset(next((terms for host, terms in self.filter_terms if host == forum.key), ()))

    def forum_for_key(self, key: str) -> Forum | None:
        return next((forum for forum in self.forums if forum.key == key), None)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, web: bool = True) -> Settings:
        env = os.environ if environ is None else environ
        if not web:  # a run outside the web service (`for_run`): what only the web reads is the web's to check
            env = {name: value for name, value in env.items() if name not in WEB_ONLY}
        values = {f.name: f.metadata["env"].value(env) for f in fields(cls) if "env" in f.metadata}
        settings = cls(**{name: value for name, value in values.items() if value is not None})
        settings.check_credentials()
        return settings

    def for_run(self, forums: tuple[Forum, ...], **fixed: Any) -> Settings:
        """These settings for a run outside the web service over `forums` alone (a static build, `feedbridge build`):
        what they say of other forums left out, and no key signed in with."""
        keys = {forum.key for forum in forums}
        return replace(self, **{"forums": forums, "credentials": (),
            "multisite": tuple(kept for group in self.multisite if (kept := tuple(k for k in group if k in keys))),
            "filter_terms": tuple(terms for terms in self.filter_terms if terms[0] in keys), **fixed})

    def check_credentials(self) -> None:
        """Every credential names a forum the bridge serves, and signed URLs have a secret to be made with."""
        for credential in self.credentials:
            if self.forum_for_key(credential.host) is None:
                raise ConfigError(f"FEEDBRIDGE_CREDENTIALS: {credential.host} is not a forum of FEEDBRIDGE_FORUMS "
                                  f"({', '.join(f.key for f in self.forums)})", "FEEDBRIDGE_CREDENTIALS")
        if self.credentials and not self.secret:
            raise ConfigError("FEEDBRIDGE_SECRET must be set when FEEDBRIDGE_CREDENTIALS is: private feeds are "
                              "read only through URLs signed with it (feedbridge sign)", "FEEDBRIDGE_SECRET")
        if self.personal and not (self.secret and self.connect_key):
            raise ConfigError("FEEDBRIDGE_PERSONAL=on needs FEEDBRIDGE_SECRET (members' feed URLs are sealed with it) "
                              "and FEEDBRIDGE_CONNECT_KEY (the RSA key forums encrypt members' keys to)",
                              "FEEDBRIDGE_PERSONAL")
        if stranger := next((r.host for r in self.auth_redirects if self.forum_for_key(r.host) is None), None):
            raise ConfigError(f"FEEDBRIDGE_AUTH_REDIRECTS: {stranger} is not a forum of FEEDBRIDGE_FORUMS",
                              "FEEDBRIDGE_AUTH_REDIRECTS")
        for name, value in (("FEEDBRIDGE_SECRET", self.secret), ("FEEDBRIDGE_SECRET_PREVIOUS", self.secret_previous)):
            if value is not None and len(value) < 16:
                raise ConfigError(f"{name} must be at least 16 characters (e.g. `openssl rand -hex 32`)", name)
