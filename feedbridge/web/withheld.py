"""A feed URL's capability, kept out of everything the cache stores.

Two kinds of feed URL carry one: a signed feed's `token=` (`feedbridge.feeds.request.signing`), which reads
the forum with the bridge's key, and a personal feed's sealed token in its path
(`feedbridge.feeds.members.personal`), which holds a member's key. A feed links to itself (Atom's
`rel="self"` and its id, RSS's `atom:link`, JSON Feed's `feed_url`) and an `.html` view to its formats, and
those bytes are what the cache keeps: in Redis, for every instance and whoever reads Redis. So what is
rendered to be kept is rendered from the URL with a mark where its token stands (`withheld`), and each
answer gets the token back (`restored`): the feed route, the hit path and the `.html` view, the three places
a kept body is served. The client gets the bytes rendered from its own URL, as before.

The cache keys are still made from the URL as the client gave it (`feedbridge.web.routes`), token included
(a digest: no key holds it): a kept body is only ever served for a URL that holds its own token, and two
tokens never share a copy. So the ETag, a digest of the kept bytes, still tells every version of one URL's
answer apart: for one URL the token put back is always the same, and the bytes served change exactly when
the bytes kept do.

The mark stands for one token, and only that token's holder can make it: `~fb`, the first 128 bits of the
token's SHA-256 in hex, and `~` (`mark`). A forum's users write what the entries say, and a body is served
with every occurrence of its mark replaced: a mark anyone could write (as one fixed word was, before) put the
reader's token wherever a topic title or post quoted it, and an image URL quoting it in a reader's view
would send the token off. Making this mark takes the token itself; the mark does not give it back (it is a
digest), so one kept in Redis reads nothing. It is made only of characters that every place a URL is written
leaves as they are: a URL's path and query (`urlencode`, `quote`, `feedbridge.render.uris.iri_to_uri`), XML
attributes and text, JSON strings, Jinja's escaping. It has `~`, which neither token has (hex; URL-safe
base64), so no token is a mark, and no `.` (the `.html` view cuts a path's format extension at its last one).
"""

from __future__ import annotations

import hashlib


def mark(token: str) -> str:
    """What stands for `token` in what is kept: made from the token, so nobody without it can write it."""
    return f"~fb{hashlib.sha256(token.encode()).hexdigest()[:32]}~"


def withheld(text: str, token: str | None) -> str:
    """`text` (a URL or a path of the request) as what is kept is rendered from it: `token` as its `mark`."""
    return text if token is None else text.replace(token, mark(token))


def restored(body: bytes, token: str | None) -> bytes:
    """A kept body as it is served to a URL holding `token`: the token wherever its `mark` stands."""
    return body if token is None else body.replace(mark(token).encode(), token.encode())
