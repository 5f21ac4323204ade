"""A signed URL's token covers every parameter that changes what is fetched or shown (issue 31, item 5).

Before: the token of `/u/alice.atom` also opened `/u/alice.atom?category=N`, which (where the forum refuses
the user's own list) reads `/latest.json?category=N` with the key: `canonical_query` left a user feed's
`category=` out. The property checked here is the general one: two requests whose specs differ in what
names a feed's content (`FeedSpec.cache_key`) never share a token. The parameters are the rows of the
parameter table (`feedbridge/feeds/request/params.py`) that the spec reads, so a parameter added later without a case
here fails the first test instead of going unsigned.
"""

from __future__ import annotations

import httpx
import pytest

from feedbridge.config import Settings
from feedbridge.errors import RequestError, RouteNotFound
from feedbridge.feeds.request import params
from feedbridge.feeds.request.signing import token
from feedbridge.feeds.request.spec import FeedSpec, parse_feed_request
from tests.appserver import procfile_web
from tests.test_private import SECRET, private_forum, sign

HOST = "forum.example.org"

# Every feed kind, by a path of its own.
PATHS = ["latest", "top", "hot", "c/compiler/5", "c/parent/child/7", "tag/gpu", "tag/gpu+cuda", "u/alice",
         "filter", "t/some-topic/35", "posts", "u/alice/posts"]
# Each parameter the spec reads, with values that parse on at least some kinds.
VARIANTS: dict[str, list[str]] = {
    "author": ["bob", "bob,carol"],
    "q": ["inductor", "gpu -cuda", "status:open tag:gpu+cuda"],  # the last a /filter feed's Discourse query
    "keyword": ["inductor", "gpu -cuda"],  # a /filter feed's keyword filter (its q= is the forum's)
    "limit": ["5", "7"],
    "pages": ["2", "3"],
    "period": ["weekly", "daily"],
    "category": ["5", "9"],
    "content": ["full"],
    "tag": ["gpu", "gpu+cuda"],
    "exclude_tag": ["meta"],
    "exclude_category": ["11"],
    "exclude_pinned": ["1"],
    "min_replies": ["1", "10"],
    "max_replies": ["0", "5"],  # 0 is a ceiling (the unanswered topics), not "no threshold": it must be signed
    "min_likes": ["5"],
    "min_views": ["1000"],
    "digest": ["daily", "weekly"],
    "exclude_author": ["bob", "bob,carol"],
    "max_age": ["36h", "2w"],
}


def settings() -> Settings:
    return Settings.from_env({"FEEDBRIDGE_FORUMS": f"https://{HOST}",
                              "FEEDBRIDGE_CREDENTIALS": f"{HOST}=user-api-key:k3y0123456789abcdef",
                              "FEEDBRIDGE_SECRET": SECRET, "FEEDBRIDGE_PAGES_MAX": "5"})


def parsed(path: str, args: dict[str, list[str]]) -> FeedSpec | None:
    """The spec of a request, or None where the bridge refuses it (a refused request fetches nothing)."""
    base = path == "filter" and "q" not in args
    try:
        return parse_feed_request(settings(), f"{HOST}/{path}.atom", {**args, **({"q": ["x"]} if base else {})})
    except (RequestError, RouteNotFound):
        return None


def test_every_parameter_the_spec_reads_has_a_case_here() -> None:
    """Every row of the table but the token itself (what signs the rest) is read into the spec."""
    read = {p.name for p in params.PARAMETERS if p.value != "signature"}
    assert "category" in read and "q" in read
    assert read - set(VARIANTS) == set(), "a parameter the spec reads has no case in VARIANTS"


@pytest.mark.parametrize("path", PATHS)
def test_a_token_never_opens_a_feed_with_a_parameter_added_or_changed(path: str) -> None:
    """For each kind: the base feed and the feed with one parameter added, and with two values of one
    parameter: whenever their contents differ, so do their tokens."""
    signed_with = settings().secret or ""
    checked = 0
    for name, values in VARIANTS.items():
        specs = [s for s in (parsed(path, {name: [v]}) for v in values) if s is not None]
        base = parsed(path, {})
        for spec in specs:
            for other in [base, *specs]:
                if other is None or other is spec or other.cache_key() == spec.cache_key():
                    continue
                checked += 1
                assert token(signed_with, f"/{HOST}/{path}.atom", spec) != token(
                    signed_with, f"/{HOST}/{path}.atom", other), (path, name, spec.canonical_query())
    assert checked >= 8, path  # every kind takes several of these parameters


def test_a_user_feeds_category_is_signed() -> None:
    """The case found from outside: `/u/alice.atom` and `/u/alice.atom?category=9` read different lists."""
    plain, narrowed = parsed("u/alice", {}), parsed("u/alice", {"category": ["9"]})
    assert plain is not None and narrowed is not None
    assert ("category", "9") in narrowed.canonical_query()
    assert token(SECRET, f"/{HOST}/u/alice.atom", plain) != token(SECRET, f"/{HOST}/u/alice.atom", narrowed)


def test_on_the_procfiles_server_an_added_parameter_gets_403_and_nothing_is_fetched() -> None:
    """Over a real socket, on gunicorn's gevent worker: each feed kind's signed URL, with each parameter it
    takes added or changed, is 403 with one line, and the forum sees no request at all."""
    with private_forum("json") as p:
        env = p.env()
        settings = Settings.from_env(env)
        with procfile_web(env) as (url, _process):
            refused = 0
            for path in ["latest", "c/compiler/5", "u/alice", "t/35", "posts", "u/alice/posts", "tag/gpu"]:
                signed = sign(settings, f"/{p.key}/{path}.atom?limit=5")
                base = parsed(path, {"limit": ["5"]})
                assert base is not None
                for name, values in VARIANTS.items():
                    value = "6" if name == "limit" else values[0]
                    changed = parsed(path, {"limit": ["5"], name: [value]})
                    if changed is None or changed.cache_key() == base.cache_key():
                        continue  # refused with 400 before any fetch, or the same feed (period= on /latest)
                    response = httpx.get(f"{url}{signed}&{name}={value}" if name != "limit"
                                         else url + signed.replace("limit=5", "limit=6"), timeout=30)
                    assert response.status_code == 403, (path, name, response.text)
                    assert "\n" not in response.text.strip()
                    refused += 1
            assert p.forum.requests == []
            assert refused >= 40
            # The signed URL itself is served (the check above refuses changes, not the feed).
            assert httpx.get(url + sign(settings, f"/{p.key}/latest.atom?limit=5"), timeout=30).status_code == 200
