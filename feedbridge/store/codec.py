"""Cache values as bytes for a store shared between processes (Redis), and back.

No pickle: whoever can write to the shared store must not be able to run code in the service, so only
plain data crosses: MessagePack, through `msgspec`, decoded against the entry's own dataclass types. A
value is used only when every field, nested topics included, has its declared type (`Topic(id='not-an-int',
title=123)` is refused); anything else is a miss, never an error. MessagePack carries bytes as bytes, so a
rendered feed's body is stored as it is (no base64: feeds are the bulk of the cache).

A value is its kind, a newline, then the entry. A kind is one line of `KINDS`: a new entry dataclass is
shared by adding it there, and a field added to one needs nothing (its type is read from the dataclass).

`SCHEMA` changes when the encoding or the fields of the cached dataclasses change, and the Redis keys
carry it: after a deploy that changes the format, old entries are simply never read again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import typing
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from feedbridge.errors import DecodeError
from feedbridge.store.entries import (
    CollectedEntry,
    DirectoryEntry,
    FailureEntry,
    FeedEntry,
    HeadEntry,
    PageEntry,
    PostsEntry,
    SiteEntry,
    SourceEntry,
    TopicEntry,
)

VERSION = 2
LAST_SECOND = 253402300799.0
"""9999-12-31T23:59:59Z, the last time a date can be made of: no time kept is further from 1970 either way."""
KINDS: dict[str, type] = {
    "page": PageEntry,
    "feed": FeedEntry,
    "topic": TopicEntry,
    "categories": DirectoryEntry,
    "source": SourceEntry,
    "failure": FailureEntry,
    "head": HeadEntry,
    "posts": PostsEntry,
    "collected": CollectedEntry,
    "site": SiteEntry,
    "number": float,  # an int is stored as one too, and comes back a float
}


def _fingerprint() -> str:
    """Field names, types and defaults of every kind and the dataclasses inside them, from msgspec's own
    schema of them (without the docstrings it copies in): a field added to `Topic` changes it by itself."""
    _, components = msgspec.json.schema_components(list(KINDS.values()))
    shape = {name: {k: v for k, v in part.items() if k not in ("title", "description")}
             for name, part in components.items()}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:8]


SCHEMA = f"v{VERSION}.{_fingerprint()}"

HELD_UNDER: dict[str, type] = {
    "feed": FeedEntry, "view": FeedEntry, "page": PageEntry, "topic": TopicEntry, "categories": DirectoryEntry,
    "site": SiteEntry, "posthead": HeadEntry, "postsof": PostsEntry, "postlist": CollectedEntry,
    "failed": FailureEntry, "source": SourceEntry, "ratelimit": float, "handshake": float, "revoked": float,
    "topicslow": float,
}
"""What a key of each kind (`feedbridge.store.keys`; a scope's `private-page` is a `page`) holds: a value of
another kind read under it is a miss. Each checks its fields against its own types, but a well-formed value of
one kind under another's key (a number where a page should be) answered 500 on every instance reading it."""


def kind_of(key: str) -> str:
    """A key's kind (`feedbridge.store.keys`), without its scope: `private-page:…` is a `page`."""
    return key.partition(":")[0].rpartition("-")[2]


def holds(key: str, value: Any) -> bool:
    """Whether `value` is what `key`'s kind holds (any value, for a kind not in `HELD_UNDER`)."""
    return isinstance(value, HELD_UNDER.get(kind_of(key), object))

_KIND_OF: dict[type, bytes] = {model: kind.encode() for kind, model in KINDS.items()} | {int: b"number"}
_DECODERS: dict[bytes, msgspec.msgpack.Decoder[Any]] = {
    kind.encode(): msgspec.msgpack.Decoder(model) for kind, model in KINDS.items()
}
_ENCODER = msgspec.msgpack.Encoder()


def encode(value: Any) -> bytes:
    """Raises TypeError for a value this codec does not know, and msgspec's ValueError for one it cannot write
    (a string with a lone surrogate has no UTF-8 form): the caller then keeps it local only."""
    kind = _KIND_OF.get(type(value))
    if kind is None:
        raise TypeError(f"no cache encoding for {type(value).__name__}")
    return kind + b"\n" + _ENCODER.encode(value)


def decode(data: bytes) -> Any:
    kind, newline, payload = data.partition(b"\n")
    decoder = _DECODERS.get(kind) if newline else None
    if decoder is None:
        raise DecodeError(f"unknown cached value kind {kind[:32]!r}")
    try:
        value = decoder.decode(payload)
    except msgspec.DecodeError as exc:  # msgspec.ValidationError too: a field of the wrong type
        raise DecodeError(f"malformed cached {kind.decode()} value: {exc}") from None
    if (wrong := _ill_formed(value)) is not None:
        raise DecodeError(f"a cached {kind.decode()} value has {wrong}")
    return value


def _ill_formed(value: object, name: str = "") -> str | None:
    """What makes a well-typed value unfit, if anything: a date without its offset (msgspec reads one as a naive
    datetime; the models' dates are UTC, and sorting an aware and a naive one raises), a number that is not
    finite (an infinite `stored_at` was a 500 on every instance reading it: `int()` of a Retry-After, a date
    formatted from it), or a negative `size` (one of -10**15 read from Redis turned the in-process store's byte
    bound off: it held 30 times its bound, and never evicted again)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return "a date without its offset"
        try:
            value.astimezone(UTC)
        except OverflowError:  # 9999-12-31T23:00-14:00 is past what a UTC date can be: a 500 wherever it was shown
            return "a date that is no UTC date"
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return f"a number that is not finite ({value})"
        # Every float kept is a time (seconds since 1970) or a span of them: past year 9999 no date can be made
        # of it (a `last_modified` of 1e300 was a 500 on every instance that formatted the header)
        return None if -LAST_SECOND <= value <= LAST_SECOND else f"a time out of range ({value:g})"
    if isinstance(value, int) and name == "size" and value < 0:
        return f"a negative size ({value})"
    if isinstance(value, str) and name == "etag" and not (value.isascii() and value.isprintable()):
        return "an ETag that no header can carry"  # a CR LF in one was a 500 wherever it was sent
    if isinstance(value, tuple):
        return next((wrong for item in value if (wrong := _ill_formed(item)) is not None), None)
    model: Any = type(value)
    if _is_model(model):
        return next((wrong for field in _checked_fields(model)
                     if (wrong := _ill_formed(getattr(value, field), field)) is not None), None)
    return None


@functools.cache
def _checked_fields(model: Any) -> tuple[str, ...]:
    """The fields of `model` whose values `_ill_formed` reads at any depth: dates, numbers, sizes and ETags."""
    hints = typing.get_type_hints(model)
    names = (f.name for f in (msgspec.structs.fields(model) if issubclass(model, msgspec.Struct) else fields(model)))
    return tuple(name for name in names if name in ("size", "etag") or _holds_checked(hints[name]))


def _is_model(kind: Any) -> bool:
    """Whether `kind` is one of the models: a dataclass, or `Topic`, a `msgspec.Struct`."""
    return isinstance(kind, type) and (is_dataclass(kind) or issubclass(kind, msgspec.Struct))


def _holds_checked(hint: Any) -> bool:
    if hint in (datetime, float):
        return True
    if _is_model(hint):
        return bool(_checked_fields(hint))
    return any(_holds_checked(arg) for arg in typing.get_args(hint))
