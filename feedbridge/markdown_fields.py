"""Field readers shared by the list parser and the topic parser: the two Markdown formats of one forum
write timestamps and URLs the same way, so they are read the same way."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from urllib.parse import urljoin, urlsplit

_ROUTE_START = re.compile(r"/(?:c|tag|tags|latest|top|hot|new|unread|categories|u|t)(?:[/.?]|$)")


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
