"""Settings from environment variables (twelve-factor: a PaaS configures the app only through them).

Every size, count and timeout that protects the service or the forums it reads is bounded here, in one
place, so the README's table of limits and the code cannot drift apart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from feedbridge.errors import ConfigError

SOURCE_CHOICES = ("auto", "markdown", "json")
"""How a forum's lists are read: `auto` detects it (Markdown where the forum serves it, else JSON);
`markdown` and `json` are an admin's explicit choice, and skip detection."""


@dataclass(frozen=True, slots=True)
class Forum:
    """A forum the service may fetch from. `key` is how it appears in feed paths: host[:port][/subfolder].

    `source` is one of `SOURCE_CHOICES`, written as a prefix in FEEDBRIDGE_FORUMS (`json:https://...`).
    """

    base_url: str
    source: str = "auto"

    @property
    def key(self) -> str:
        parts = urlsplit(self.base_url)
        return parts.netloc + parts.path.rstrip("/")


def parse_forum(url: str) -> Forum:
    """A base URL, optionally prefixed with its source: `https://a.example`, `json:https://b.example`."""
    text = url.strip()
    source = "auto"
    prefix, colon, rest = text.partition(":")
    if colon and prefix in SOURCE_CHOICES:
        source, text = prefix, rest.strip()
    elif colon and rest.strip().startswith(("http://", "https://")):
        raise ConfigError(f"FEEDBRIDGE_FORUMS: {url!r}: the source prefix must be one of "
                          f"{', '.join(SOURCE_CHOICES)} (as in json:https://forum.example)")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"FEEDBRIDGE_FORUMS: {url!r} is not an http(s) base URL")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"FEEDBRIDGE_FORUMS: {url!r} must be a plain base URL (no query, fragment or user)")
    return Forum(f"{parts.scheme}://{parts.netloc.lower()}{parts.path.rstrip('/')}", source)


DEFAULT_FORUMS = (Forum("https://dev-discuss.pytorch.org"),)


@dataclass(frozen=True, slots=True)
class Settings:
    forums: tuple[Forum, ...] = DEFAULT_FORUMS
    cache_ttl: int = 300
    stale_ttl: int = 24 * 3600
    cache_max_bytes: int = 64 * 1024 * 1024
    cache_url: str | None = None
    pages_default: int = 1
    pages_max: int = 5
    fetch_concurrency: int = 3
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    total_timeout: float = 20.0
    max_body_bytes: int = 5 * 1024 * 1024
    retries: int = 2
    max_redirects: int = 3
    retry_after_max: int = 3600
    singleflight_wait: float = 25.0
    content_default: str = "excerpt"
    topic_budget: int = 30
    topic_ttl: int = 7 * 24 * 3600
    # How long an `auto` forum's detected source (Markdown or JSON) is trusted before it is checked again.
    source_recheck: int = 3600
    log_level: str = "INFO"
    # Abuse bounds (feedbridge.feeds.cached): remembered failures, the per-forum budget of upstream requests,
    # one deadline per request, and the threads that may wait on upstream (FEEDBRIDGE_THREADS - 2).
    negative_ttl: int = 30
    forum_budget: int = 120
    request_deadline: float = 25.0
    worker_timeout: int = 40
    threads: int = 8

    @property
    def cold_slots(self) -> int:
        """Requests per process that may wait on upstream at once: two threads always stay free for hits."""
        return max(self.threads - 2, 1)

    def forum_for_key(self, key: str) -> Forum | None:
        for forum in self.forums:
            if forum.key == key:
                return forum
        return None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        forums_raw = env.get("FEEDBRIDGE_FORUMS", "").split()
        forums = tuple(parse_forum(url) for url in forums_raw) or DEFAULT_FORUMS
        content = env.get("FEEDBRIDGE_CONTENT", "excerpt")
        if content not in ("excerpt", "full"):
            raise ConfigError(f"FEEDBRIDGE_CONTENT must be 'excerpt' or 'full', not {content!r}")
        pages_max = _int(env, "FEEDBRIDGE_PAGES_MAX", 5, 1, 20)
        worker_timeout = _int(env, "FEEDBRIDGE_WORKER_TIMEOUT", 40, 2, 3600)
        deadline = _float(env, "FEEDBRIDGE_REQUEST_DEADLINE", 25.0, 1.0, 3600)
        if deadline >= worker_timeout:
            # Past the worker timeout gunicorn kills the worker mid-request: every request on it gets nothing.
            raise ConfigError(f"FEEDBRIDGE_REQUEST_DEADLINE ({deadline:g}) must be below FEEDBRIDGE_WORKER_TIMEOUT "
                              f"({worker_timeout}), so a slow forum gives an answer, not a killed worker")
        return cls(
            forums=forums,
            cache_ttl=_int(env, "FEEDBRIDGE_CACHE_TTL", 300, 0, 7 * 24 * 3600),
            stale_ttl=_int(env, "FEEDBRIDGE_STALE_TTL", 24 * 3600, 0, 30 * 24 * 3600),
            cache_max_bytes=_int(env, "FEEDBRIDGE_CACHE_MAX_BYTES", 64 * 1024 * 1024, 1024 * 1024, 1 << 34),
            cache_url=env.get("FEEDBRIDGE_CACHE_URL") or env.get("REDIS_URL") or None,
            pages_default=_int(env, "FEEDBRIDGE_PAGES_DEFAULT", 1, 1, pages_max),
            pages_max=pages_max,
            fetch_concurrency=_int(env, "FEEDBRIDGE_FETCH_CONCURRENCY", 3, 1, 8),
            connect_timeout=_float(env, "FEEDBRIDGE_CONNECT_TIMEOUT", 5.0, 0.1, 60),
            read_timeout=_float(env, "FEEDBRIDGE_READ_TIMEOUT", 10.0, 0.1, 120),
            total_timeout=_float(env, "FEEDBRIDGE_TOTAL_TIMEOUT", 20.0, 0.2, 300),
            max_body_bytes=_int(env, "FEEDBRIDGE_MAX_BODY_BYTES", 5 * 1024 * 1024, 1024, 64 * 1024 * 1024),
            retries=_int(env, "FEEDBRIDGE_RETRIES", 2, 0, 5),
            retry_after_max=_int(env, "FEEDBRIDGE_RETRY_AFTER_MAX", 3600, 1, 24 * 3600),
            content_default=content,
            topic_budget=_int(env, "FEEDBRIDGE_TOPIC_BUDGET", 30, 0, 200),
            topic_ttl=_int(env, "FEEDBRIDGE_TOPIC_TTL", 7 * 24 * 3600, 60, 90 * 24 * 3600),
            source_recheck=_int(env, "FEEDBRIDGE_SOURCE_RECHECK", 3600, 60, 7 * 24 * 3600),
            log_level=env.get("FEEDBRIDGE_LOG_LEVEL", "INFO").upper(),
            singleflight_wait=_float(env, "FEEDBRIDGE_SINGLEFLIGHT_WAIT", 25.0, 0.05, 300),
            negative_ttl=_int(env, "FEEDBRIDGE_NEGATIVE_TTL", 30, 0, 3600),
            forum_budget=_int(env, "FEEDBRIDGE_FORUM_BUDGET", 120, 0, 100_000),
            request_deadline=deadline,
            worker_timeout=worker_timeout,
            threads=_int(env, "FEEDBRIDGE_THREADS", 8, 1, 256),
        )


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    return int(_number(env, name, default, low, high, int))


def _float(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    return _number(env, name, default, low, high, float)


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float, kind: type) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {'an integer' if kind is int else 'a number'}, not {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, not {value}")
    return float(value)
