"""Field readers shared by the list parser and the topic parser: the two Markdown formats of one forum
write timestamps and URLs the same way, so they are read the same way."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from urllib.parse import urljoin, urlsplit

_NOT_TEXT = re.compile(r"[\x00-\x08\x0e-\x1f\ufffd]")
_ROUTE_START = re.compile(r"/(?:c|tag|tags|latest|top|hot|new|unread|categories|u|t)(?:[/.?]|$)")


def sniff(text: str | bytes, max_chars: int, error: type[ValueError], expected: str) -> str:
    """The text without leading blanks, or `error` saying what came instead of Discourse Markdown.

    Forums answer with login pages, JSON errors and binary as readily as with Markdown; both parsers
    refuse them the same way, with a message naming what was seen. Line ends come back as `\\n`.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{expected}, got bytes that are not UTF-8 text ({exc.reason} at {exc.start})") from None
    if len(text) > max_chars:
        raise error(f"{expected}, got {len(text)} characters (limit {max_chars})")
    head = text.lstrip("\ufeff \t\r\n")
    if not head:
        raise error(f"{expected}, got an empty body")
    if head.find("\x00", 0, 4096) >= 0 or len(_NOT_TEXT.findall(head, 0, 4096)) > 8:
        raise error(f"{expected}, got binary data")
    lowered = head[:256].lower()
    if lowered.startswith(("<!doctype", "<html", "<?xml", "<head", "<body")) or "<html" in lowered:
        raise error(f"{expected}, got an HTML document (a login page or an error page?)")
    if head[0] in "{[":
        raise error(f"{expected}, got JSON")
    return head.replace("\r\n", "\n") if "\r" in head else head


def utc(value: str) -> datetime | None:
    """An ISO 8601 timestamp (any offset, the reader's time zone included) as aware UTC; None if invalid."""
    try:
        moment = datetime.fromisoformat(value.strip())
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: "0001-01-01T00:00:00+01:00" is before year 1 in UTC
        return None


def absolute(url: str, base: str | None) -> str:
    if url.startswith(("http://", "https://")) or not base:
        return url
    return urljoin(base.rstrip("/") + "/", url)


def derive_base(url: str | None) -> str | None:
    """The forum root of a list or topic URL (with any subfolder): everything before the first route segment."""
    if not url or not url.startswith(("http://", "https://")):
        return None
    parts = urlsplit(url)
    match = _ROUTE_START.search(parts.path)
    path = parts.path[: match.start()] if match else ""
    return f"{parts.scheme}://{parts.netloc}{path}"
