"""Cache values as bytes for a store shared between processes (Redis), and back.

No pickle: whoever can write to the shared store must not be able to run code in the service, so only
plain data crosses (JSON). A value is one line of JSON, then, for a rendered feed, its body as raw bytes
(no base64: feeds are the bulk of the cache). Anything that does not decode to exactly the expected
shape is a miss, never an error.

`SCHEMA` changes when the encoding or the fields of the cached dataclasses change, and the Redis keys
carry it: after a deploy that changes the format, old entries are simply never read again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from datetime import datetime
from typing import Any

from feedbridge.models import Category, Listing, Topic
from feedbridge.store.entries import DirectoryEntry, FailureEntry, FeedEntry, PageEntry, SourceEntry, TopicEntry

VERSION = 1
_MODELS = (Topic, Listing, PageEntry, FeedEntry, TopicEntry, Category, DirectoryEntry, SourceEntry,
           FailureEntry)


def _fingerprint() -> str:
    """Field names and types of everything encoded: a field added to `Topic` changes the schema by itself."""
    shape = ";".join(f"{m.__name__}:" + ",".join(f"{f.name}={f.type}" for f in fields(m)) for m in _MODELS)
    return hashlib.sha256(shape.encode()).hexdigest()[:8]


SCHEMA = f"v{VERSION}.{_fingerprint()}"


class DecodeError(ValueError):
    """Stored bytes are not a value this version wrote."""


def encode(value: Any) -> bytes:
    """Raises TypeError for a value this codec does not know (the caller then keeps it local only)."""
    if isinstance(value, FeedEntry):
        head = {"t": "feed", "etag": value.etag, "last_modified": value.last_modified, "stored_at": value.stored_at}
        return _line(head) + value.body
    if isinstance(value, PageEntry):
        head = {"t": "page", "listing": _plain(value.listing), "etag": value.etag,
                "last_modified": value.last_modified, "stored_at": value.stored_at, "size": value.size}
        return _line(head)
    if isinstance(value, TopicEntry):
        topic = None if value.topic is None else _plain(value.topic)
        return _line({"t": "topic", "topic": topic, "stored_at": value.stored_at, "size": value.size})
    if isinstance(value, DirectoryEntry):
        categories = [{f.name: getattr(c, f.name) for f in fields(c)} for c in value.categories]
        return _line({"t": "categories", "categories": categories, "stored_at": value.stored_at})
    if isinstance(value, SourceEntry):
        head = {"t": "source", "source": value.source, "stored_at": value.stored_at, "reason": value.reason,
                "status": value.status}
        return _line(head)
    if isinstance(value, FailureEntry):
        return _line({"t": "failure", "kind": value.kind, "message": value.message, "stored_at": value.stored_at})
    if isinstance(value, float | int) and not isinstance(value, bool):
        return _line({"t": "number", "v": value})
    raise TypeError(f"no cache encoding for {type(value).__name__}")


def decode(data: bytes) -> Any:
    head_bytes, newline, body = data.partition(b"\n")
    if not newline:
        raise DecodeError("no header line")
    try:
        head = json.loads(head_bytes)
        kind = head.pop("t")
        if kind == "feed":
            return FeedEntry(body=body, **head)
        if body:
            raise DecodeError(f"unexpected body after a {kind!r} value")
        if kind == "page":
            listing = head.pop("listing")
            topics = tuple(_build(Topic, t) for t in listing.pop("topics"))
            return PageEntry(listing=_build(Listing, {**listing, "topics": topics}), **head)
        if kind == "topic":
            topic = head.pop("topic")
            return TopicEntry(topic=None if topic is None else _build(Topic, topic), **head)
        if kind == "categories":
            categories = tuple(Category(**c) for c in head.pop("categories"))
            return DirectoryEntry(categories=categories, **head)
        if kind == "source":
            source = SourceEntry(**head)
            if isinstance(source.source, str) and isinstance(source.stored_at, float | int):
                return source
            raise DecodeError("malformed source entry")
        if kind == "failure":
            failure = FailureEntry(**head)
            if isinstance(failure.kind, str) and isinstance(failure.message, str) \
                    and isinstance(failure.stored_at, float | int):
                return failure
            raise DecodeError("malformed failure entry")
        if kind == "number":
            value = head["v"]
            if isinstance(value, float | int) and not isinstance(value, bool):
                return float(value)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DecodeError(f"malformed cached value: {exc}") from None
    raise DecodeError(f"unknown cached value kind {kind!r}")


def _line(head: dict[str, Any]) -> bytes:
    # json.dumps escapes newlines inside strings, so the first b"\n" always ends the header.
    return json.dumps(head, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _plain(obj: Any) -> Any:
    if isinstance(obj, Listing | Topic):
        return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple):
        return [_plain(item) for item in obj]
    if isinstance(obj, datetime):
        return obj.isoformat()
    return obj


def _build(model: type, data: dict[str, Any]) -> Any:
    """The dataclass back from `_plain`: field types (strings, under postponed annotations) say what to revive."""
    values = dict(data)
    for f in fields(model):
        value = values.get(f.name)
        if value is None:
            continue
        if "datetime" in str(f.type):
            values[f.name] = datetime.fromisoformat(value)
        elif str(f.type).startswith("tuple[str"):
            values[f.name] = tuple(value)
    return model(**values)
