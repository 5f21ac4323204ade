"""A feed URL's capability, kept out of everything the cache stores.

Two kinds of feed URL carry one: a signed feed's `token=` (`feedbridge.feeds.request.signing`), which reads
the forum with the bridge's key, and a personal feed's sealed token in its path
(`feedbridge.feeds.members.personal`), which holds a member's key. A feed links to itself (Atom's
`rel="self"` and its id, RSS's `atom:link`, JSON Feed's `feed_url`) and an `.html` view to its formats, and
those bytes are what the cache keeps: in Redis, for every instance and whoever reads Redis. So what is
rendered to be kept is rendered from the URL with `MARK` where its token stands (`withheld`), and each
answer gets the token back (`restored`): the feed route, the hit path and the `.html` view, the three places
a kept body is served. The client gets the bytes rendered from its own URL, as before.

The cache keys are still made from the URL as the client gave it (`feedbridge.web.routes`), token included
(a digest: no key holds it): a kept body is only ever served for a URL that holds its own token, and two
tokens never share a copy. So the ETag, a digest of the kept bytes, still tells every version of one URL's
answer apart: for one URL the token put back is always the same, and the bytes served change exactly when
the bytes kept do.

`MARK` is made only of characters that every place a URL is written leaves as they are: a URL's path and
query (`urlencode`, `quote`, `feedbridge.render.uris.iri_to_uri`), XML attributes and text, JSON strings,
Jinja's escaping. It has `~`, which neither token has (hex; URL-safe base64), so no token is the mark, and no
`.` (the `.html` view cuts a path's format extension at its last one). A forum post or a request that
quotes the mark gets the token in its place too: only in the answer to a URL that holds that token.
"""

from __future__ import annotations

MARK = "~feedbridge-token~"
_MARK = MARK.encode()


def withheld(text: str, token: str | None) -> str:
    """`text` (a URL or a path of the request) as what is kept is rendered from it: `token` as `MARK`."""
    return text if token is None else text.replace(token, MARK)


def restored(body: bytes, token: str | None) -> bytes:
    """A kept body as it is served to a URL holding `token`: the token wherever `MARK` stands."""
    return body if token is None else body.replace(_MARK, token.encode())
