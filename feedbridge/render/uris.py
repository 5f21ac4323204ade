"""IRIs to URIs (RFC 3987 §3.1), for every URL a feed carries.

A forum's links, the profile URLs built from usernames (`/u/Zoë`, `/u/用户42`), category slugs and the
bridge's own request paths can hold non-ASCII characters or spaces. Atom accepts IRIs, but RSS and JSON
Feed say URL, and strict consumers check `authors[].url` or `<link>` against RFC 3986: so each one is
mapped to the URI that names the same resource before it is written. Non-ASCII characters become the
percent-encoded UTF-8 bytes, an internationalised host becomes its punycode form (IDNA), and characters
RFC 3986 does not allow where they stand (space, `"<>\\^`{|}`, a lone `%`, `[`/`]` outside an IP literal, a
second `#`) are percent-encoded too. Existing `%XX` escapes and the reserved characters that give a URI
its structure (`:/?#@!$&'()*+,;=`) are left alone, so a URI goes through unchanged and the function is
idempotent.
"""

from __future__ import annotations

import re
import string
from urllib.parse import quote

_PCHAR = r"A-Za-z0-9\-._~!$&'()*+,;=:@%"  # RFC 3986 pchar (with % for escapes), the base of every part
# What a URI may hold anywhere, as bytes for `bytes.translate`, which finds anything else several times faster
# than a regex scan (`is_uri` runs over every URL of every feed).
_URI_BYTES = (string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@%/?#").encode("ascii")
_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_PATH = re.compile(rf"[^{_PCHAR}/?]|%(?![0-9A-Fa-f]{{2}})")  # path and query; also the fragment
_USERINFO = re.compile(r"[^A-Za-z0-9\-._~!$&'()*+,;=:%]|%(?![0-9A-Fa-f]{2})")
_HOST = re.compile(r"[^A-Za-z0-9\-._~!$&'()*+,;=%]|%(?![0-9A-Fa-f]{2})")
# RFC 3986 appendix B, without its whitespace handling: every string matches.
_REFERENCE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*:)?(?://(?P<authority>[^/?#]*))?(?P<rest>[^#]*)"
                        r"(?:#(?P<fragment>.*))?", re.DOTALL)


def is_uri(text: str) -> bool:
    """True when `iri_to_uri` would return `text` unchanged: the cheap test for the common case."""
    return (text.isascii() and not text.encode("ascii").translate(None, _URI_BYTES)
            and ("%" not in text or _LONE_PERCENT.search(text) is None) and text.count("#") <= 1)


def iri_to_uri(iri: str) -> str:
    """The URI for `iri` (absolute or relative); a string that already is one comes back as it is."""
    if is_uri(iri):
        return iri
    parts = _REFERENCE.fullmatch(iri.strip(" \t\n\r\f"))
    assert parts is not None  # every group is optional
    uri = parts["scheme"] or ""
    if parts["authority"] is not None:
        uri += "//" + _authority(parts["authority"])
    uri += _PATH.sub(_escape, parts["rest"])
    if parts["fragment"] is not None:
        uri += "#" + _PATH.sub(_escape, parts["fragment"])
    return uri


def _authority(authority: str) -> str:
    userinfo, at, hostport = authority.rpartition("@")
    if hostport.startswith("["):  # an IP literal: ASCII by definition, kept with its brackets and port
        host, port = hostport, ""
    else:
        host, colon, port = hostport.rpartition(":")
        if not colon or not (port.isascii() and port.isdigit() or not port):
            host, colon, port = hostport, "", ""
        host = _HOST.sub(_escape, _idna(host)) + colon
    return (_USERINFO.sub(_escape, userinfo) + at if at else "") + host + port


def _idna(host: str) -> str:
    """An internationalised host name in its ASCII (punycode) form; unchanged when it has none (a label
    too long, or empty). What is left non-ASCII is then percent-encoded, which RFC 3986 allows in a host."""
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def _escape(match: re.Match[str]) -> str:
    # errors="replace": a lone surrogate has no UTF-8 form and becomes %3F rather than an exception.
    return quote(match.group(), safe="", errors="replace")
