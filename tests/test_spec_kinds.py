"""What the feed request's pieces declare rather than spell out: one spec builder per route kind, the
parameter at fault carried by the error that names it, what each source's lists lack, and every error
class in `feedbridge/errors.py`. A static config points at the key of a bad parameter by these fields, and
the service completes a list from them, so each is pinned here apart from the flows that read it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import get_args

import pytest

import feedbridge
from feedbridge.config import Forum, Settings
from feedbridge.discourse.listing import parse_listing
from feedbridge.errors import ConfigError, FeedMoved, NoBaseURL, NotAListError, RequestError
from feedbridge.feeds.request.spec import KINDS, MOVED, ROUTES, RouteKind, kind_of, parse_feed_request
from feedbridge.feeds.select.filters import make_filter
from feedbridge.feeds.sources.dialects import JSON, MARKDOWN, SOURCES, lacking, source_of
from feedbridge.models import Listing

SETTINGS = Settings(forums=(Forum("https://forum.example"),))


def refusal(path: str, **args: str | list[str]) -> RequestError:
    with pytest.raises(RequestError) as refused:
        parse_feed_request(SETTINGS, f"forum.example/{path}",
                           {k: v if isinstance(v, list) else [v] for k, v in args.items()})
    return refused.value


def test_every_route_kind_has_exactly_one_spec_builder() -> None:
    kinds = get_args(RouteKind)
    assert len(set(kinds)) == len(kinds)
    # `personal`, a member's own list, has no public route: feeds/members/personal.py builds its specs.
    assert "personal" in kinds and "personal" not in ROUTES
    assert sorted(KINDS) == sorted(set(kinds) - {"personal"}) == sorted(ROUTES)


@pytest.mark.parametrize(("path", "args", "param"), [
    ("latest.atom", {"pages": "0"}, "pages"),
    ("latest.atom", {"content": "all"}, "content"),
    ("latest.atom", {"keyword": "gpu"}, "keyword"),
    ("latest.atom", {"category": "x"}, "category"),
    ("top.atom", {"period": "decade"}, "period"),
    ("latest.atom", {"q": ["a", "b"]}, "q"),
    ("latest.atom", {"author": "\x01"}, "author"),
    ("latest.atom", {"author": "a b"}, "author"),
    ("latest.atom", {"tag": "a b,c"}, "tag"),
    ("latest.atom", {"tag": "a/b"}, "tag"),
    ("latest.atom", {"exclude_tag": "a/b"}, "exclude_tag"),
    ("latest.atom", {"exclude_category": "0"}, "exclude_category"),
    ("latest.atom", {"min_replies": "3", "max_replies": "1"}, "max_replies"),
    ("latest.atom", {"min_likes": "-1"}, "min_likes"),
    ("latest.atom", {"limit": "0"}, "limit"),
    ("latest.atom", {"digest": "hourly"}, "digest"),
    ("latest.atom", {"q": "OR"}, "q"),
    ("filter.atom", {"q": "status:open", "keyword": "OR"}, "keyword"),  # the keyword query of /filter
    ("filter.atom", {}, "q"),
    ("filter.atom", {"q": "a:"}, "q"),
    ("posts.atom", {"min_likes": "3"}, "min_likes"),
    ("t/9.atom", {"category": "5"}, "category"),
])
def test_a_parameter_error_names_its_parameter(path: str, args: dict[str, str | list[str]], param: str) -> None:
    assert refusal(path, **args).param == param


@pytest.mark.parametrize("path", ["nowhere/latest.atom", "latest.xyz", "nope.atom", "tag/a+b/7.atom"])
def test_a_path_error_names_no_parameter(path: str) -> None:
    with pytest.raises(RequestError) as refused:
        parse_feed_request(SETTINGS, path if path.startswith("nowhere") else f"forum.example/{path}", {})
    assert refused.value.param is None


def test_a_moved_path_says_where_its_feed_went() -> None:
    """`/search` was the latest list with a keyword query: asked for in any format, with or without its `q=`,
    it names the path that replaces it (the web answers 301 there), and no route takes its name again."""
    for args in ({"q": "x"}, {}):
        moved = refusal("search.rss", **args)
        assert isinstance(moved, FeedMoved) and moved.status == 404 and moved.param is None
        assert (moved.path, moved.to, moved.needs) == ("search.rss", "latest.rss", "q")
        assert "/latest with the same q=" in moved.message
    assert all(kind_of(name) is None and kind_of(gone.to) is not None for name, gone in MOVED.items())
    assert not isinstance(refusal("searches.atom"), FeedMoved)


def test_a_list_without_a_base_url_says_so_by_its_class() -> None:
    with pytest.raises(NoBaseURL) as refused:
        parse_listing("# Latest topics\n\n**URL:** /latest\n")
    assert isinstance(refused.value, NotAListError)
    with pytest.raises(NotAListError) as other:
        parse_listing("<html></html>")
    assert not isinstance(other.value, NoBaseURL)


def listing(dialect: str) -> Listing:
    return Listing(title="", base_url="https://forum.example", dialect=dialect, topics=())


def test_each_listing_knows_its_source_and_what_it_lacks() -> None:
    assert source_of(listing("json")) is JSON and source_of(listing("c4")) is MARKDOWN
    assert set(SOURCES.values()) == {MARKDOWN, JSON}
    assert JSON.lacks == frozenset() and {"likes", "views", "tags", "category_id", "pinned"} <= MARKDOWN.lacks
    assert lacking([]) == lacking([listing("json")]) == frozenset()
    assert lacking([listing("json"), listing("p1")]) == MARKDOWN.lacks


@pytest.mark.parametrize(("given", "needed"), [
    ({"min_likes": 1}, "min_likes"),
    ({"min_views": 1}, "min_views"),
    ({"tags_all": ["a", "b"]}, "tag"),
    ({"exclude_tags": ["a"]}, "exclude_tag"),
    ({"exclude_categories": [3]}, "exclude_category"),
    ({"exclude_pinned": True}, "exclude_pinned"),
    ({"tags": ["a"]}, "tag"),  # the JSON list of the same page, not the topics' pages (30 at most)
    ({"min_replies": 1, "max_replies": 3, "authors": ["a"]}, None),  # on every list
])
def test_what_a_filter_needs_follows_what_the_source_lacks(given: dict[str, object], needed: str | None) -> None:
    feed_filter = make_filter(**given)
    assert feed_filter.json_needed(MARKDOWN.lacks) == needed
    assert feed_filter.json_needed(JSON.lacks) is None
    assert feed_filter.json_needed(MARKDOWN.lacks - {"likes", "views", "tags", "category_id", "pinned"}) is None


def test_a_config_error_keeps_its_setting_apart_from_what_is_wrong() -> None:
    made = ConfigError.about("FEEDBRIDGE_FORUMS", "'ftp://x' is not an http(s) base URL")
    assert (made.message, made.setting, made.detail) == (
        "FEEDBRIDGE_FORUMS: 'ftp://x' is not an http(s) base URL", "FEEDBRIDGE_FORUMS",
        "'ftp://x' is not an http(s) base URL")
    plain = ConfigError("FEEDBRIDGE_SECRET must be set", "FEEDBRIDGE_SECRET")
    assert plain.detail == plain.message


def test_every_error_class_is_in_the_errors_module() -> None:
    """Module-private control flow (`_Malformed`) and the CLI's click exceptions aside; a re-export of an
    error from its old home is the class itself, not a second one."""
    elsewhere = []
    for info in pkgutil.walk_packages(feedbridge.__path__, "feedbridge."):
        if info.name in ("feedbridge.__main__", "feedbridge.cli", "feedbridge.errors") or info.name.endswith(
                "gunicorn_conf"):
            continue
        module = importlib.import_module(info.name)
        elsewhere += [f"{info.name}.{name}" for name, value in vars(module).items()
                      if inspect.isclass(value) and issubclass(value, BaseException) and not name.startswith("_")
                      and value.__module__ == info.name]
    assert elsewhere == []
