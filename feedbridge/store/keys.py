"""Every key of the store and the control store, made one way: its kind, a colon, a digest of its parts.

The kind is what a reader of Redis sees and what the control store bounds separately (`failed`,
`ratelimit`, `source`, ...); the digest keeps request text out of keys and bounds their length whatever
the parts are. Two entries share a key exactly when their kind and parts are equal.
"""

from __future__ import annotations

import hashlib


def key(kind: str, *parts: object) -> str:
    """`kind:` and the first 32 hex digits of SHA-256 over the parts joined by `|`."""
    return f"{kind}:" + hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:32]
