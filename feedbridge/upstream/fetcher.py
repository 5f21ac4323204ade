"""Upstream HTTP: fetch one forum URL with every limit a public service needs.

Redirects are followed by hand so that each hop can be checked against the forum it started from: a
redirect is the classic way to turn a fetcher into an open proxy (to 169.254.169.254, to localhost).
The body is read as a stream and abandoned as soon as it passes the size limit or the overall deadline,
so a 20 MB body or a server dripping one byte a second costs bounded memory and time.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

import httpx

from feedbridge import USER_AGENT
from feedbridge.config import Forum, Settings
from feedbridge.errors import (
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
    UpstreamRefused,
    UpstreamTimeout,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    status: int  # 200, or 304 when a conditional request matched
    text: str = ""
    etag: str | None = None
    last_modified: str | None = None


def is_within(forum: Forum, url: str) -> bool:
    """Same scheme, host and port as the forum, and under its subfolder."""
    parts = urlsplit(url)
    base = urlsplit(forum.base_url)
    if (parts.scheme, parts.netloc.lower()) != (base.scheme, base.netloc.lower()):
        return False
    if parts.username or parts.password or "\\" in url:
        return False
    prefix = base.path.rstrip("/")
    return not prefix or parts.path == prefix or parts.path.startswith(prefix + "/")


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` as seconds from now: delta-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    current = datetime.fromtimestamp(time.time() if now is None else now, timezone.utc)
    return max((moment - current).total_seconds(), 0.0)


class Fetcher:
    """One pooled httpx client per process; safe to share between threads."""

    def __init__(self, settings: Settings, transport: httpx.BaseTransport | None = None):
        self.settings = settings
        self.client = httpx.Client(
            timeout=httpx.Timeout(
                settings.read_timeout, connect=settings.connect_timeout, pool=settings.connect_timeout
            ),
            # httpx retries only failed connection attempts, never a request that reached the server.
            transport=transport or httpx.HTTPTransport(retries=settings.retries),
            headers={"User-Agent": USER_AGENT, "Accept": "text/markdown, text/plain;q=0.5"},
            follow_redirects=False,
            trust_env=False,
        )

    def close(self) -> None:
        self.client.close()

    def get(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None) -> Fetched:
        if not is_within(forum, url):
            raise UpstreamError(f"refusing to fetch {url}: not under {forum.base_url}")
        deadline = time.monotonic() + self.settings.total_timeout
        headers = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        for _hop in range(self.settings.max_redirects + 1):
            started = time.monotonic()
            fetched, location = self._once(url, headers, deadline)
            log.info(
                "upstream GET %s -> %s %.0fms", url, fetched.status if fetched else "redirect",
                (time.monotonic() - started) * 1000,
            )
            if fetched is not None:
                return fetched
            target = urljoin(url, location)
            if not is_within(forum, target):
                raise UpstreamError(f"upstream redirected {url} to {target}, outside {forum.base_url}")
            url = target
        raise UpstreamError(f"upstream redirected more than {self.settings.max_redirects} times from {url}")

    def _once(self, url: str, headers: dict[str, str], deadline: float) -> tuple[Fetched | None, str]:
        try:
            with self.client.stream("GET", url, headers=headers) as response:
                status = response.status_code
                if status in (301, 302, 303, 307, 308):
                    location = response.headers.get("Location")
                    if not location:
                        raise UpstreamError(f"upstream answered {status} without a Location for {url}")
                    return None, location
                if status == 304:
                    return Fetched(url, 304, etag=response.headers.get("ETag"),
                                   last_modified=response.headers.get("Last-Modified")), ""
                if status == 429:
                    wait = retry_after_seconds(response.headers.get("Retry-After"))
                    raise UpstreamRateLimited(f"upstream rate-limited us (429) for {url}", retry_after=60.0 if wait is None else wait)
                if status in (404, 410):
                    raise UpstreamNotFound(f"upstream answered {status} for {url}")
                if status in (401, 403):
                    raise UpstreamRefused(f"upstream answered {status} for {url}")
                if status != 200:
                    raise UpstreamError(f"upstream answered {status} for {url}")
                body = self._read_bounded(response, url, deadline)
                try:
                    text = body.decode(response.charset_encoding or "utf-8")
                except (UnicodeDecodeError, LookupError):
                    raise UpstreamError(f"upstream sent a body that is not valid UTF-8 text for {url}") from None
                return Fetched(url, 200, text, response.headers.get("ETag"), response.headers.get("Last-Modified")), ""
        except httpx.TimeoutException:
            raise UpstreamTimeout(f"upstream timed out for {url}") from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"upstream connection failed for {url}: {type(exc).__name__}") from None

    def _read_bounded(self, response: httpx.Response, url: str, deadline: float) -> bytes:
        limit = self.settings.max_body_bytes
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise UpstreamError(f"upstream body for {url} is {int(declared)} bytes, over the {limit}-byte limit")
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > limit:
                raise UpstreamError(f"upstream body for {url} passed the {limit}-byte limit")
            if time.monotonic() > deadline:
                raise UpstreamTimeout(f"upstream took longer than {self.settings.total_timeout:g}s for {url}")
            chunks.append(chunk)
        return b"".join(chunks)
