"""A feedgen extension for `slash:comments`, the reply count that feed readers show next to an entry.

feedgen ships no Slash module. The feed-level half only declares the `slash` prefix on the root element,
so each entry's element reuses it instead of repeating an `xmlns` declaration per entry.
"""

from __future__ import annotations

from feedgen.ext.base import BaseEntryExtension, BaseExtension
from lxml import etree

SLASH_NS = "http://purl.org/rss/1.0/modules/slash/"
_COMMENTS_TAG = f"{{{SLASH_NS}}}comments"


class SlashExtension(BaseExtension):
    """Register with `FeedGenerator.register_extension("slash", SlashExtension, SlashEntryExtension)`."""

    def extend_ns(self) -> dict[str, str]:
        return {"slash": SLASH_NS}


class SlashEntryExtension(BaseEntryExtension):
    """`entry.slash.comments(n)`; nothing is written while the count is unknown (None)."""

    def __init__(self) -> None:
        self._comments: int | None = None

    def comments(self, count: int | None = None) -> int | None:
        if count is not None:
            self._comments = count
        return self._comments

    def _extend(self, entry: etree._Element) -> etree._Element:
        if self._comments is not None:
            etree.SubElement(entry, _COMMENTS_TAG).text = str(self._comments)
        return entry

    extend_atom = _extend
    extend_rss = _extend
