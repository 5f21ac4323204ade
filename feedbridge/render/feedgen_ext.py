"""feedgen extensions for the two per-entry elements feedgen has no cheap way to write, and for the RSS
channel fields feedgen decides itself.

`slash:comments` is the reply count that feed readers show next to an entry; feedgen ships no Slash
module. `dc:creator` is RSS's author by name (RSS's own `<author>` must be an e-mail address); feedgen's
Dublin Core module writes it too, but walks all fifteen DC terms for every item, a fifth of an RSS render.
Each feed-level half only declares its prefix on the root element, so entries reuse it instead of
repeating an `xmlns` declaration per entry.

Register a pair with `FeedGenerator.register_extension(prefix, FeedHalf, EntryHalf)`.

`ChannelExtension` runs after feedgen has built the RSS channel, and corrects two of its fields: feedgen
takes `<channel><link>` from the last link added (the alternate must come first, for Atom readers that
take the first link as the home page, and the self link after it), and always writes `lastBuildDate`,
the time of rendering when none was set.
"""

from __future__ import annotations

from feedgen.ext.base import BaseEntryExtension, BaseExtension
from lxml import etree

SLASH_NS = "http://purl.org/rss/1.0/modules/slash/"
DC_NS = "http://purl.org/dc/elements/1.1/"


class _Namespace(BaseExtension):
    prefix: str
    uri: str

    def extend_ns(self) -> dict[str, str]:
        return {self.prefix: self.uri}


class _OneElement(BaseEntryExtension):
    """One optional element per entry; nothing is written while its value is unknown (None)."""

    tag: str

    def __init__(self) -> None:
        self._value: int | str | None = None

    def _set(self, value: int | str | None) -> int | str | None:
        if value is not None:
            self._value = value
        return self._value

    def _extend(self, entry: etree._Element) -> etree._Element:
        if self._value is not None:
            etree.SubElement(entry, self.tag).text = str(self._value)
        return entry

    extend_atom = _extend
    extend_rss = _extend


class ChannelExtension(BaseExtension):
    """RSS only: the channel's `<link>`, and `lastBuildDate` left out when no date is known."""

    def __init__(self) -> None:
        self._link: str | None = None
        self._has_last_build_date = True

    def set(self, link: str, has_last_build_date: bool) -> None:
        self._link = link
        self._has_last_build_date = has_last_build_date

    def extend_rss(self, rss: etree._Element) -> etree._Element:
        channel = rss.find("channel")
        if self._link is not None:
            channel.find("link").text = self._link
        if not self._has_last_build_date:
            channel.remove(channel.find("lastBuildDate"))
        return rss


class SlashExtension(_Namespace):
    prefix, uri = "slash", SLASH_NS


class SlashEntryExtension(_OneElement):
    tag = f"{{{SLASH_NS}}}comments"

    def comments(self, count: int | None = None) -> int | str | None:
        return self._set(count)


class CreatorExtension(_Namespace):
    prefix, uri = "dc", DC_NS


class CreatorEntryExtension(_OneElement):
    tag = f"{{{DC_NS}}}creator"

    def creator(self, name: str | None = None) -> int | str | None:
        return self._set(name)
