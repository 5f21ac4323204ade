"""OPML 2.0 subscription lists: the one writer behind the service's `/{forum}/opml` and the static build's
`feeds.opml`.

What OPML 2.0 (http://opml.org/spec2.opml) asks, and what is written here:

- "An <outline> is an XML element containing at least one required attribute, text": every outline has
  `text`.
- Subscription lists: "Each sub-element of the body of the OPML document is a node of type rss or an
  outline element that contains nodes of type rss." A feed is an outline with type="rss" (the spec knows no
  other value, Atom feeds included), `text`, `xmlUrl`, and `title` ("probably the same as text, it should
  not be omitted") and `htmlUrl`. A folder is the other kind: an outline that only contains feeds; the spec
  gives it no type and no xmlUrl, so it has none (an importer that sees type="rss" would subscribe to it).
  It carries `title` beside the required `text`, because some readers name folders by `title`.

The document is a pure function of its input (no dateCreated, no clock), so unchanged feeds give unchanged
bytes. ElementTree escapes every name; URLs are made URIs, since names and slugs come from upstream.

`opml_frame` makes a document once for every URL the bridge is reached by: the service's list of a forum's
500 categories took 4.4 ms to write, per request, and only the bridge's own URL (the request's host) differs
between two requests for it.
"""

from __future__ import annotations

import secrets
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, replace
from xml.sax.saxutils import escape

from feedbridge.render.uris import iri_to_uri

SPEC_URL = "http://opml.org/spec2.opml"


@dataclass(frozen=True, slots=True)
class Subscription:
    """One feed of the list: what a reader shows, the feed's URL, and the page it follows."""

    title: str
    xml_url: str
    html_url: str


def opml_document(title: str, subscriptions: Sequence[Subscription], folder: str | None = None) -> bytes:
    """The list, its feeds directly in the body, or inside one folder outline named `folder`."""
    root = ET.Element("opml", version="2.0")
    head = ET.SubElement(root, "head")
    ET.SubElement(head, "title").text = title
    ET.SubElement(head, "docs").text = SPEC_URL
    parent = body = ET.SubElement(root, "body")
    if folder is not None:
        parent = ET.SubElement(body, "outline", text=folder, title=folder)
    for feed in subscriptions:
        ET.SubElement(parent, "outline", type="rss", text=feed.title, title=feed.title,
                      xmlUrl=iri_to_uri(feed.xml_url), htmlUrl=iri_to_uri(feed.html_url))
    if not len(parent):  # "A <body> contains one or more <outline> elements" (OPML 2.0): a list of none says so
        ET.SubElement(parent, "outline", text="No feeds yet")
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


@dataclass(frozen=True, slots=True)
class OpmlFrame:
    """A list made once whose feeds' URLs start with a base given when it is sent: the document cut where the
    base goes."""

    parts: tuple[bytes, ...]

    def document(self, base_url: str) -> bytes:
        """The list with `base_url` (an absolute URL without a trailing slash) before every feed's path,
        written as `opml_document` writes an attribute: a URI, XML-escaped."""
        return escape(iri_to_uri(base_url), {'"': "&quot;"}).encode().join(self.parts)


def opml_frame(title: str, subscriptions: Sequence[Subscription], folder: str | None = None) -> OpmlFrame:
    """`opml_document` for subscriptions whose `xml_url` is a path ("/forum/latest.atom") under a base that
    `OpmlFrame.document` fills in. While the document is written the base is a name drawn at random, which
    nothing a forum sent can hold (names, slugs and descriptions come from upstream)."""
    base = f"http://{secrets.token_hex(16)}.invalid"
    written = opml_document(title, [replace(s, xml_url=base + s.xml_url) for s in subscriptions], folder)
    return OpmlFrame(tuple(written.split(base.encode())))
