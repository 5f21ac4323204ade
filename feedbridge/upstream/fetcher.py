"""Upstream HTTP: fetch one forum URL with every limit a public service needs.

Redirects are followed by hand so that each hop can be checked against the forum it started from: a
redirect is the classic way to turn a fetcher into an open proxy (to 169.254.169.254, to localhost).
The body is read as a stream and abandoned as soon as it passes the size limit or the overall deadline,
so a 20 MB body or a server dripping one byte a second costs bounded memory and time. Compressed bodies
are inflated as they are read, a bounded piece at a time (`feedbridge.upstream.transport`), so the size limit
counts decoded bytes as they are produced.

Everything the forum sends is untrusted: paths are normalised before they are checked against the forum,
validators and `Retry-After` are kept only when well-formed, and every failure of any kind leaves this
module as an `UpstreamError`, so callers can serve their last good copy instead of an internal error.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

import h11
import httpx
import rfc3986

from feedbridge import USER_AGENT, metrics
from feedbridge.config import Credential, Forum, Settings, ascii_netloc
from feedbridge.errors import (
    BotWall,
    CrawlerRefused,
    DeadlinePassed,
    LoginRequired,
    Reason,
    UnsafePath,
    UpstreamError,
    UpstreamNotFound,
    UpstreamRateLimited,
    UpstreamRefused,
    UpstreamTimeout,
)
from feedbridge.upstream.transport import (
    ACCEPT_ENCODING,
    CRAWLER_REFUSAL,
    BoundedTransport,
    Inflater,
    challenge,
    content_encoding,
    http_date,
    is_json,
    peek,
    retry_after_seconds,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Answer:
    """A forum's last answer to this process (`/healthz`): its HTTP status, or why none came, and when."""

    status: str
    at: float  # time.time()


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    status: int  # 200, or 304 when a conditional request matched
    text: str = ""
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True, slots=True)
class Exchanged:
    """What `Fetcher.exchange` got: the status, the headers (names in lower case, as httpx gives them) and
    the body as text."""

    status: int
    headers: dict[str, str]
    text: str = ""


_ENCODED_SEPARATOR = re.compile(r"%(?:2f|5c)", re.IGNORECASE)
# RFC 3986 §2.3's unreserved characters (letters, digits, `-._~`) percent-encoded: the same URI decoded
# (§6.2.2.2), as servers read it. `/%62/` is `/b/`: another forum's subfolder, which a check on the encoded
# path let a redirect reach.
_ENCODED_UNRESERVED = re.compile(r"%(?:3[0-9]|4[1-9a-f]|5[0-9a]|6[1-9a-f]|7[0-9a]|2d|2e|5f|7e)", re.IGNORECASE)


def _decoded(path: str) -> str:
    return _ENCODED_UNRESERVED.sub(lambda found: chr(int(found[0][1:], 16)), path)
_SLASHES = re.compile(r"/{2,}")


def normalise_url(url: str) -> str:
    """The URL as a server will resolve it, so that what is checked is what is fetched.

    Done by hand first, as `rfc3986` does neither: percent-encoded unreserved characters are decoded (RFC
    3986 §6.2.2.2 allows it, and servers treat `%2e%2e` as `..` and `%62` as `b`), and runs of slashes are
    merged (nginx does, and `/sub//../x` would otherwise leave the subfolder on the server although it stays
    inside it by the RFC). `rfc3986` then normalises the path: dot segments removed (§5.2.4), escapes in upper case. An
    encoded `/` or `\\` is refused: whether it separates segments depends on the server. The fragment
    is dropped (it is never sent). Raises `UnsafePath`, or `ValueError` for what `urlsplit` cannot read.
    """
    parts = urlsplit(url)
    if _ENCODED_SEPARATOR.search(parts.path):
        raise UnsafePath(f"{url} has an encoded slash or backslash in its path")
    path = _SLASHES.sub("/", _decoded(parts.path))
    # Built from its parts rather than parsed, so that no path (`a:b`) can be read as a scheme. Where the
    # RFC's answer is `/` (`/../`, `/a/../../`), rfc3986 2.0 gives an empty path.
    normal: str | None = rfc3986.URIReference(None, None, path, None, None).normalize().path
    return urlunsplit((parts.scheme, parts.netloc, normal or path[:1], parts.query, ""))


def resolve(url: str, reference: str) -> str:
    """`reference` (a Location) against `url`, normalised as `normalise_url` does.

    `urljoin` removes dot segments itself, by the RFC, before slashes could be merged: the reference's
    path is brought into the same form first, so that `/sub//../x` is judged as the server will read it.
    """
    parts = urlsplit(reference)
    path = _SLASHES.sub("/", _decoded(parts.path))
    return normalise_url(urljoin(url, urlunsplit(parts._replace(path=path))))


def is_within(forum: Forum, url: str, among: Sequence[Forum] = ()) -> bool:
    """Same scheme, host and port as the forum, and under its subfolder, once the path is normalised; and
    not under the subfolder of another of the forums `among` (the configured ones) within it: a forum at the
    host's root and another at its `/b` are two forums, and what is under `/b` is the second's alone (its
    own admins, its own key), which a redirect or a link of the first must not reach with the first's key."""
    if "\\" in url:
        return False
    try:
        parts = urlsplit(normalise_url(url))
        netloc = parts.netloc.lower()  # bücher.example is xn--bcher-kva.example; an ASCII one is read here
        origin = (parts.scheme, netloc if netloc.isascii() else ascii_netloc(netloc))
    except ValueError:  # a host IDNA refuses too
        return False
    if parts.username or parts.password or not _under(forum, origin, parts.path):
        return False
    depth = len(forum.subfolder)
    return not any(len(other.subfolder) > depth and _under(other, origin, parts.path) for other in among)


def _under(forum: Forum, origin: tuple[str, str], path: str) -> bool:
    """A URL of `origin` (scheme, host and port in lower case) and normalised `path` on the forum, under its
    subfolder: the forum's are split once, when it is made (`Forum.origin`, `Forum.subfolder`)."""
    prefix = forum.subfolder
    return origin == forum.origin and (not prefix or path == prefix or path.startswith(prefix + "/"))


_ETAG = re.compile(r'(?:W/)?"[\x21\x23-\x7e]*"')  # RFC 9110 §8.8.3, without obs-text
MAX_ETAG_LENGTH = 256


def valid_etag(value: str | None) -> str | None:
    """The ETag if it is an RFC 9110 entity-tag of visible ASCII, else None: it is sent back verbatim in
    `If-None-Match`, and anything else either cannot be encoded into a header or means nothing."""
    if value is None or len(value) > MAX_ETAG_LENGTH or not _ETAG.fullmatch(value):
        return None
    return value


def valid_last_modified(value: str | None) -> str | None:
    """The Last-Modified value if it is an HTTP-date (visible ASCII, parseable), else None."""
    if value is None or http_date(value.strip()) is None:
        return None
    return value.strip()


DEADLINE_SLACK = 0.05  # a socket timeout may fire a hair before the monotonic clock reaches the deadline
# What a fetch can raise besides our own errors and httpx's transport errors: httpx's stream and URL errors,
# and the ValueError/UnicodeError/LookupError/OverflowError that odd headers give inside httpx or h11.
# Each becomes an UpstreamError, so callers serve their stale copy instead of answering 500.
_FETCH_FAILURES = (httpx.InvalidURL, httpx.StreamError, ValueError, LookupError, OverflowError)


SIGN_IN_PATHS = ("/login", "/session/sso")
"""Where core's `redirect_to_login` (app/controllers/application_controller.rb) sends a non-JSON GET of a
login-required forum: `/login`, or `/session/sso` with DiscourseConnect; `/auth/PROVIDER` (below) with one
authenticator. `/session/sso` answers with a redirect to another host, the single sign-on provider."""
def sign_in_path(forum: Forum, url: str) -> str | None:
    """The path under the forum of `url` when it is where the forum signs people in, else None."""
    if not is_within(forum, url):
        return None
    path = urlsplit(url).path[len(forum.subfolder):]
    auth = path.removeprefix("/auth/")
    if path in SIGN_IN_PATHS or (auth != path and 0 < len(auth) <= 60 and "/" not in auth):
        return path
    return None


def user_agent(settings: Settings) -> str:
    """`feedbridge/VERSION`, and `(+URL)` where the operator says who runs the instance
    (FEEDBRIDGE_CONTACT_URL), as polite crawlers name a page about themselves."""
    return f"{USER_AGENT} (+{settings.contact_url})" if settings.contact_url else USER_AGENT


_HEADERS = {"User-Agent": USER_AGENT, "Accept": "text/markdown, text/plain;q=0.5", "Accept-Encoding": ACCEPT_ENCODING}


class Fetcher:
    """One pooled connection per forum host and process; safe to share between threads.

    Requests go straight to httpx's transport, not through an `httpx.Client`: the fetcher follows redirects
    itself and sends no cookies (a forum's key only on a `signed` request), and a client's cookie jar would
    be state one request leaves for the next (a `Set-Cookie` from a forum, sent back on every later fetch,
    whoever asked for it). Skipping the client's request building, redirect and cookie steps is also a
    fifth of a cold fetch's time.
    """

    def __init__(self, settings: Settings, transport: httpx.BaseTransport | None = None):
        """`transport` replaces the network (the offline demo answers from a saved copy). The forums' keys
        (FEEDBRIDGE_CREDENTIALS) are sent only with a `signed` request to their own forum (its redirects
        within the forum included; `get` refuses any URL off the forum, so a key never reaches another host)."""
        self.settings = settings
        # httpx retries only failed connection attempts, never a request that reached the server.
        self.transport = transport or BoundedTransport(settings)
        self.credentials = {credential.host: credential for credential in settings.credentials}
        self.last: dict[str, Answer] = {}
        """Each forum's last answer, by its key: a forum the process asked (a configured one, or the CLI's)."""
        self.headers = {**_HEADERS, "User-Agent": user_agent(settings)}

    def close(self) -> None:
        self.transport.close()

    def get(self, forum: Forum, url: str, etag: str | None = None, last_modified: str | None = None,
            signed: bool = False, credential: Credential | None = None, until: float | None = None) -> Fetched:
        """`url`, following redirects within the forum, all within `FEEDBRIDGE_TOTAL_TIMEOUT`, and by `until` (a
        `time.monotonic()`: the deadline of the request waiting on it) when that comes sooner; `signed`
        sends the forum's key (FEEDBRIDGE_CREDENTIALS), and fails when there is none; `credential` (a
        member's key, `feedbridge.feeds.members.personal`) is sent instead, to its own forum only.

        Validators are checked again here, as they are sent: a copy stored by an older version (or a
        shared Redis) must not be able to break every revalidation of its page.
        """
        if not is_within(forum, url, self.settings.forums):
            raise UpstreamError(f"refusing to fetch {url}: not under {forum.base_url}, or under another configured "
                                "forum's", reason=Reason.OFF_FORUM)
        url = normalise_url(url)
        deadline = time.monotonic() + self.settings.total_timeout
        if cut := until is not None and until < deadline:
            deadline = until
        headers = dict(self.headers)
        if credential is not None:
            if credential.host != forum.key:
                raise UpstreamError(f"a key for {credential.host} is never sent to {forum.key}", reason=Reason.UNUSABLE)
            headers |= credential.headers()
        elif signed:
            credential = self.credentials.get(forum.key)
            if credential is None:
                raise UpstreamError(f"no credential for {forum.key}", reason=Reason.UNUSABLE)
            headers |= credential.headers()
        if etag := valid_etag(etag):
            headers["If-None-Match"] = etag
        if last_modified := valid_last_modified(last_modified):
            headers["If-Modified-Since"] = last_modified
        for hop in range(self.settings.max_redirects + 1):
            started = time.monotonic()
            try:
                timeout = self._hop_timeout(url, deadline, hop)
            except UpstreamTimeout:  # nothing sent: begun (or redirected) past the deadline
                if cut:
                    raise DeadlinePassed(f"the request's deadline passed before {url} was asked for") from None
                raise
            try:
                fetched, location, status = self._once(url, headers, timeout, deadline, hop)
            except UpstreamError as exc:
                if cut and isinstance(exc, UpstreamTimeout) and time.monotonic() >= deadline - DEADLINE_SLACK:
                    exc = DeadlinePassed(f"the request's deadline passed while the forum was asked for {url}")
                self._answered(forum, url, str(exc.upstream_status or exc.reason))
                # A forum failing is what an operator looks for first (WARNING); a page it says is gone or refuses,
                # an answer like any other (INFO, as each fetch's line).
                ms = (time.monotonic() - started) * 1000
                level = logging.INFO if isinstance(exc, UpstreamNotFound | UpstreamRefused) else logging.WARNING
                log.log(level, "upstream GET %s failed: %s %.0fms", url, exc.message, ms, extra={"fields": {
                    "url": url, "status": exc.upstream_status or str(exc.reason), "ms": round(ms, 1)}})
                raise exc from None
            self._answered(forum, url, str(status))
            ms = (time.monotonic() - started) * 1000
            log.info("upstream GET %s -> %s %.0fms", url, fetched.status if fetched else "redirect", ms,
                     extra={"fields": {"url": url, "status": status, "ms": round(ms, 1)}})
            if fetched is not None:
                return fetched
            try:
                target = resolve(url, location)
            except UnsafePath:
                raise UpstreamError(f"upstream redirected {url} to {location}, outside {forum.base_url}: "
                                    "an encoded slash", reason=Reason.REDIRECT) from None
            except ValueError:
                raise UpstreamError(f"upstream redirected {url} to an unreadable Location",
                                    reason=Reason.REDIRECT) from None
            if sign_in := sign_in_path(forum, target):
                raise LoginRequired(f"upstream sent {url} to sign in at {sign_in} (login required)")
            if not is_within(forum, target, self.settings.forums):
                raise UpstreamError(f"upstream redirected {url} to {target}, outside {forum.base_url} or into "
                                    "another configured forum", reason=Reason.REDIRECT)
            url = target
        raise UpstreamError(f"upstream redirected more than {self.settings.max_redirects} times from {url}",
                            reason=Reason.REDIRECT)

    def _answered(self, forum: Forum, url: str, status: str) -> None:
        """One request sent to `forum` ended: its last answer, and its count (`feedbridge.metrics`)."""
        self.last[forum.key] = Answer(status, time.time())
        metrics.upstream(forum.key, forum.base_url, url, status)

    def exchange(self, forum: Forum, method: str, url: str, body: dict[str, str] | None = None) -> Exchanged:
        """One request that is not a read of a page (the User API key handshake's `HEAD` of
        `/user-api-key/new` and its device-flow `POST`s, `feedbridge.feeds.members.handshake`): `body` is sent as
        JSON, nothing is followed (a redirect is the answer), the answer's body is read within the same
        bounds as a page's, and its status is the caller's to read, but for 429, which is the forum's wait."""
        if not is_within(forum, url, self.settings.forums):
            raise UpstreamError(f"refusing to send to {url}: not under {forum.base_url}, or under another "
                                "configured forum's", reason=Reason.OFF_FORUM)
        url = normalise_url(url)
        deadline = time.monotonic() + self.settings.total_timeout
        headers = self.headers | {"Accept": "application/json"}
        content = b""
        if body is not None:
            content = json.dumps(body).encode()
            headers |= {"Content-Type": "application/json", "Content-Length": str(len(content))}
        try:
            request = httpx.Request(method, url, headers=headers, content=content,
                                    extensions={"timeout": self._hop_timeout(url, deadline, 0)})
            response = self.transport.handle_request(request)
            try:
                if response.status_code == 429:
                    maximum = self.settings.retry_after_max
                    wait = retry_after_seconds(response.headers.get("Retry-After"), maximum)
                    raise UpstreamRateLimited(f"upstream rate-limited us (429) for {url}", upstream_status=429,
                                              retry_after=min(60.0, maximum) if wait is None else wait)
                text = "" if method == "HEAD" else self._read_bounded(response, url, deadline, 0).decode(
                    "utf-8", errors="replace")
                log.info("upstream %s %s -> %s", method, url, response.status_code)
                return Exchanged(response.status_code, dict(response.headers.items()), text)
            finally:
                response.close()
        except UpstreamError:
            raise
        except httpx.TimeoutException:
            raise UpstreamTimeout(f"upstream timed out for {method} {url}") from None
        except (httpx.HTTPError, h11.ProtocolError, *_FETCH_FAILURES) as exc:
            raise UpstreamError(f"upstream connection failed for {method} {url}: {type(exc).__name__}",
                                reason=Reason.CONNECTION) from None

    def _hop_timeout(self, url: str, deadline: float, hop: int) -> dict[str, float]:
        """Each wait of this hop (connect, pool, every read) bounded by what is left of the whole fetch."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise UpstreamTimeout(self._late(url, hop))
        read = min(self.settings.read_timeout, remaining)
        connect = min(self.settings.connect_timeout, remaining)
        return {"connect": connect, "read": read, "write": read, "pool": connect}

    def _late(self, url: str, hop: int) -> str:
        after = f" after {hop} redirect{'s' if hop != 1 else ''}" if hop else ""
        return f"upstream took longer than {self.settings.total_timeout:g}s for {url}{after}"

    def _once(self, url: str, headers: dict[str, str], timeout: dict[str, float], deadline: float,
              hop: int) -> tuple[Fetched | None, str, int]:
        """The answer (None for a redirect), the redirect's Location, and the forum's status."""
        try:
            request = httpx.Request("GET", url, headers=headers, extensions={"timeout": timeout})
            response = self.transport.handle_request(request)
            try:
                return *self._answer(response, url, deadline, hop), response.status_code
            finally:
                response.close()
        except UpstreamError:
            raise
        except httpx.TimeoutException:
            if time.monotonic() >= deadline - DEADLINE_SLACK:  # the wait was cut to what the deadline left
                raise UpstreamTimeout(self._late(url, hop)) from None
            raise UpstreamTimeout(f"upstream timed out for {url}") from None
        except (httpx.HTTPError, h11.ProtocolError) as exc:  # h11's, should one escape httpcore unmapped
            raise UpstreamError(f"upstream connection failed for {url}: {type(exc).__name__}",
                                reason=Reason.CONNECTION) from None
        except _FETCH_FAILURES as exc:
            raise UpstreamError(f"upstream sent an answer that cannot be read for {url}: "
                                f"{type(exc).__name__}", reason=Reason.BODY) from None

    def _answer(self, response: httpx.Response, url: str, deadline: float, hop: int) -> tuple[Fetched | None, str]:
        status = response.status_code
        if status in (301, 302, 303, 307, 308):
            location = response.headers.get("Location")
            if not location:
                raise UpstreamError(f"upstream answered {status} without a Location for {url}", reason=Reason.REDIRECT,
                                    upstream_status=status)
            return None, location
        if status == 304:
            return Fetched(url, 304, etag=valid_etag(response.headers.get("ETag")),
                           last_modified=valid_last_modified(response.headers.get("Last-Modified"))), ""
        if status == 429:
            maximum = self.settings.retry_after_max
            wait = retry_after_seconds(response.headers.get("Retry-After"), maximum)
            limited = UpstreamRateLimited(f"upstream rate-limited us (429) for {url}",
                                          retry_after=min(60.0, maximum) if wait is None else wait, upstream_status=429)
            # lib/middleware/request_tracker.rb: the per-IP limiters' codes, `ip_10_secs_limit`, `ip_60_secs_limit`
            limited.by_address = response.headers.get("Discourse-Rate-Limit-Error-Code", "").startswith("ip_")
            raise limited
        peeked = peek(response, url, deadline) if status in (403, 503) and not is_json(response) else ""
        if status != 200 and (sign := challenge(response, status, peeked)):
            raise BotWall(f"upstream answered {status} with a bot challenge ({sign}) for {url}",
                          retry_after=float(max(self.settings.negative_ttl, 1)), upstream_status=status)
        if status == 403 and peeked.strip() == CRAWLER_REFUSAL:
            raise CrawlerRefused(f"upstream answered 403 {CRAWLER_REFUSAL} for {url}", upstream_status=status)
        if status in (404, 410):
            raise UpstreamNotFound(f"upstream answered {status} for {url}", upstream_status=status)
        if status in (401, 403):
            raise UpstreamRefused(f"upstream answered {status} for {url}", upstream_status=status)
        if status != 200:
            raise UpstreamError(f"upstream answered {status} for {url}", reason=Reason.ANSWERED, upstream_status=status)
        charset = _charset(response)
        try:
            known = codecs.lookup(charset).name in _CHARSETS
        except LookupError:
            known = True  # what no codec reads is said below, as it always was
        if not known:
            raise UpstreamError(f"upstream sent a body in charset {_printable(charset)!r}, which is not a charset of "
                                f"text the bridge reads, for {url}", reason=Reason.BODY)
        body = self._read_bounded(response, url, deadline, hop)
        try:
            text = body.decode(charset)
        except (UnicodeError, LookupError):
            if charset.lower().replace("_", "-") in ("utf-8", "utf8"):
                raise UpstreamError(f"upstream sent a body that is not valid UTF-8 text for {url}",
                                    reason=Reason.BODY) from None
            raise UpstreamError(
                f"upstream sent a body in charset {_printable(charset)!r}, which cannot be decoded, for {url}",
                reason=Reason.BODY) from None
        return Fetched(url, 200, text, valid_etag(response.headers.get("ETag")),
                       valid_last_modified(response.headers.get("Last-Modified"))), ""

    def _read_bounded(self, response: httpx.Response, url: str, deadline: float, hop: int) -> bytes:
        """The decoded body, read raw and inflated as it comes (`transport.Inflater`), so that the limit counts every
        decoded byte as it is produced, and the compressed bytes count against it too."""
        limit = self.settings.max_body_bytes
        declared = response.headers.get("Content-Length", "")
        if re.fullmatch(r"[0-9]{1,19}", declared) and int(declared) > limit:
            raise UpstreamError(f"upstream body for {url} is {int(declared)} bytes, over the {limit}-byte limit",
                                reason=Reason.BODY)
        coding = content_encoding(response, url) if "Content-Encoding" in response.headers else None
        inflater = Inflater(coding, url) if coding else None
        chunks: list[bytes] = []
        raw = size = 0
        for chunk in response.iter_raw():
            raw += len(chunk)
            if raw > limit:
                raise UpstreamError(f"upstream body for {url} passed the {limit}-byte limit", reason=Reason.BODY)
            for piece in inflater.feed(chunk) if inflater else (chunk,):
                size += len(piece)
                if size > limit:
                    raise UpstreamError(f"upstream body for {url} passed the {limit}-byte limit once decoded",
                                          reason=Reason.BODY)
                chunks.append(piece)
            if time.monotonic() > deadline:
                raise UpstreamTimeout(self._late(url, hop))
        if inflater:
            inflater.finish()
        return b"".join(chunks)


# The charsets a forum's text is read in: the WHATWG Encoding Standard's (what browsers decode), under Python's
# names, and UTF-32. Python decodes more under a `charset=` name, and not all in time linear in the body:
# `punycode` took 1.8 s for 100 KB, and a 1 MB body named so held a worker for over 100 s (the size bound and
# the deadline cover the read, not the decode); `idna`, `unicode_escape` and `utf-7` are no web page's either.
_CHARSETS = frozenset(codecs.lookup(name).name for name in (
    "utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be", "ascii",
    "latin-1", "cp866", "iso8859-2", "iso8859-3", "iso8859-4", "iso8859-5", "iso8859-6", "iso8859-7",
    "iso8859-8", "iso8859-10", "iso8859-13", "iso8859-14", "iso8859-15", "iso8859-16", "koi8-r", "koi8-u",
    "mac-roman", "mac-cyrillic", "cp874", "cp1250", "cp1251", "cp1252", "cp1253", "cp1254", "cp1255",
    "cp1256", "cp1257", "cp1258", "gbk", "gb18030", "big5", "big5hkscs", "euc-jp", "iso2022-jp", "shift-jis",
    "euc-kr"))
_UTF8_TYPES = frozenset(f"{kind}; charset=utf-8" for kind in ("text/markdown", "text/plain", "application/json"))


def _charset(response: httpx.Response) -> str:
    """The body's charset, UTF-8 by default. What Discourse sends is recognised by one lookup; anything else
    goes to httpx's parser (through `email.message`, a tenth of a cold fetch's own time)."""
    if response.headers.get("Content-Type", "").lower() in _UTF8_TYPES:
        return "utf-8"
    return response.charset_encoding or "utf-8"


def _printable(text: str) -> str:
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)[:40]
