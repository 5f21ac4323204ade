"""Signed feed URLs: how a reader gets a private forum's feed without the bridge's key ever leaving it.

A token is HMAC-SHA256, keyed by FEEDBRIDGE_SECRET, over what names the feed: its path under the bridge
without the format extension (one token serves `.atom`, `.rss`, `.json` and `.html` of one feed) and its
canonical query (`FeedSpec.canonical_query`, which leaves `token` out). The bridge's own host and root are
not signed, so a token works behind any name. Only the bridge can make one, each opens exactly one feed,
and rotating the secret (the old one stays accepted as FEEDBRIDGE_SECRET_PREVIOUS while readers move
over) revokes every token made with the one before.

    no token               → the public feed, fetched without any key
    a token that verifies  → the feed as the key's user sees it (a scope of its own in every cache)
    any other token        → 403, nothing fetched
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from urllib.parse import parse_qs, unquote, urlencode, urlsplit, urlunsplit

from feedbridge.config import Settings
from feedbridge.errors import Forbidden, RequestError
from feedbridge.feeds.request.spec import FeedSpec, parse_feed_request

TOKEN = "token"
MAX_TOKEN_CHARS = 64  # a SHA-256 in hex


def token(secret: str, path: str, spec: FeedSpec) -> str:
    """The token of the feed at `path` (under the bridge, leading slash, with its format extension)."""
    message = f"{_unformatted(path, spec)}?{urlencode(spec.canonical_query())}"
    return hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()


def verified(settings: Settings, path: str, spec: FeedSpec, given: Sequence[str]) -> bool:
    """Whether the request's `token=` values sign this feed: False with none given; Forbidden for any
    token that does not (a wrong one, one for another feed or other parameters, one on a forum the
    bridge has no key for), before anything is fetched."""
    if not given:
        return False
    if len(given) > 1 or len(given[0]) > MAX_TOKEN_CHARS:
        raise Forbidden("one token= please, as `feedbridge sign` made it")
    if settings.credential_for(spec.forum) is None:
        raise Forbidden(f"this bridge reads {spec.forum.key} without a key: its feeds take no token")
    secrets = [s for s in (settings.secret, settings.secret_previous) if s]
    if not any(hmac.compare_digest(token(s, path, spec).encode(), given[0].encode()) for s in secrets):
        raise Forbidden("the token does not sign this feed with these parameters (or the bridge's secret "
                        "has changed since it was made): ask for a new signed URL")
    return True


def sign_url(settings: Settings, url: str) -> str:
    """`url` (a feed URL on the bridge, or its path) back, its query canonical and its token appended."""
    parts = urlsplit(url.strip())
    if not settings.secret:
        raise RequestError("FEEDBRIDGE_SECRET is not set: there is nothing to sign with")
    args = parse_qs(parts.query, keep_blank_values=True)  # decoded as the bridge's request parser decodes
    args.pop(TOKEN, None)
    path = unquote(parts.path)
    spec = parse_feed_request(settings, path.lstrip("/"), args)
    if settings.credential_for(spec.forum) is None:
        raise RequestError(f"no credential for {spec.forum.key} in FEEDBRIDGE_CREDENTIALS: its feeds are public")
    query = urlencode([*spec.canonical_query(), (TOKEN, token(settings.secret, path, spec))])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def _unformatted(path: str, spec: FeedSpec) -> str:
    return "/" + path.lstrip("/").removesuffix(f".{spec.fmt}")
