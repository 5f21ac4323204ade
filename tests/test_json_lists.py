"""The JSON parsers against real captures of old releases, synthetic current-layout pages, and hostile input."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedbridge.discourse.json_pages import (
    parse_json_categories,
    parse_json_listing,
)
from feedbridge.discourse.listing import MAX_TEXT_CHARS
from feedbridge.discourse.posts import parse_topic_head
from feedbridge.errors import NotAListError, NotATopicError
from feedbridge.models import Category, Listing, iso_utc, listing_to_dict

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "json"
PAGES = sorted(p for p in FIXTURES.glob("*.json") if p.with_suffix(".expected.json").exists())
BASE = "https://forum.example.org"


def as_dict(listing: Listing) -> dict:
    """`listing_to_dict` plus the fields only JSON lists carry: the shape of the `*.expected.json` files."""
    data = listing_to_dict(listing)
    for row, topic in zip(data["topics"], listing.topics, strict=True):
        row.update(created_at=iso_utc(topic.created_at), tags=list(topic.tags), category_id=topic.category_id)
    return data


def topic_json(**fields: object) -> dict:
    base = {"id": 7, "title": "A title", "slug": "a-title", "posts_count": 3, "reply_count": 1,
            "created_at": "2026-10-01T10:00:00.000Z", "last_posted_at": "2026-10-02T10:00:00.000Z",
            "archetype": "regular", "visible": True, "category_id": 5, "tags": ["x"], "pinned": False,
            "posters": [{"description": "Original Poster", "user_id": 1}]}
    base.update(fields)
    return base


def page(*topics: object, users: object = ..., **topic_list: object) -> str:
    users = [{"id": 1, "username": "alice"}] if users is ... else users
    return json.dumps({"users": users, "topic_list": {"topics": list(topics), **topic_list}})


def test_every_fixture_is_present():
    names = {p.stem for p in PAGES}
    assert names == {"api-gem-2013-latest", "api-gem-2013-topics-created-by", "api-gem-2014-category-latest",
                     "api-docs-2016-latest", "current-latest", "older-tags-strings", "edge-cases"}


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_fixture_parses_to_expected(path: Path):
    expected = json.loads(path.with_suffix(".expected.json").read_text(encoding="utf-8"))
    listing = parse_json_listing(path.read_text(encoding="utf-8"), base_url=expected["base_url"],
                                 source_url=expected["url"])
    got = as_dict(listing)
    assert {k: v for k, v in got.items() if k != "topics"} == {k: v for k, v in expected.items() if k != "topics"}
    assert got["topics"] == expected["topics"]


def test_fixture_bytes_parse_like_text():
    path = FIXTURES / "current-latest.json"
    assert parse_json_listing(path.read_bytes(), base_url=BASE) == parse_json_listing(path.read_text(encoding="utf-8"), base_url=BASE)


def test_synthetic_fixtures_are_up_to_date():
    result = subprocess.run([sys.executable, "fixtures/json/make_synthetic.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout


def test_current_page_details():
    listing = parse_json_listing((FIXTURES / "current-latest.json").read_text(encoding="utf-8"), base_url=BASE + "/",
                                 source_url=f"{BASE}/latest.json")
    assert listing.base_url == BASE
    assert len(listing.topics) == 30
    pinned = listing.topics[0]  # pinned: the one topic a JSON list gives an excerpt
    assert pinned.excerpt == "Read this first: it’s short. FAQ & rules…"
    assert all(t.excerpt is None for t in listing.topics[1:])  # JSON lists have excerpts for pinned topics only
    assert listing.topics[1].url == f"{BASE}/t/topic/5000"
    assert {t.author_url for t in listing.topics if t.author == "émile"} == {f"{BASE}/u/%C3%A9mile"}
    assert {"讨论"} <= {tag for t in listing.topics for tag in t.tags}


def test_real_capture_quirks_are_read_as_captured():
    listing = parse_json_listing((FIXTURES / "api-gem-2013-latest.json").read_text(encoding="utf-8"), base_url=BASE)
    assert [t.id for t in listing.topics] == [1, 1, 1]  # the capture's three topics share id 1
    assert {t.author for t in listing.topics} == {"test_users"}  # users[], not last_poster_username
    assert listing.topics[0].last_posted_at == datetime(2013, 2, 5, 17, 14, 17, 364000, tzinfo=UTC)


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty body"),
    ("  \n\t", "empty body"),
    ("<!DOCTYPE html><html><body>Log in</body></html>", "HTML document"),
    ("\ufeff<html lang=en>", "HTML document"),
    ("# Latest\n\n**URL:** https://f/latest.md", "got text starting '# Latest"),
    ("[1, 2]", "got text starting"),
    ('{"topic_list": ', "not valid JSON"),
    ("{'topic_list': {}}", "not valid JSON"),
    ('{"errors":["The requested URL or resource could not be found."],"error_type":"not_found"}',
     "forum's error: 'The requested URL or resource could not be found.'"),
    ('{"error": "You are not permitted to view the requested resource."}', "forum's error"),
    ("{}", "empty JSON object"),
    ('{"post_stream": {}, "id": 5}', "keys 'post_stream', 'id'"),
    ('{"topic_list": "x"}', "keys 'topic_list'"),
    ('{"topic_list": {"topics": "x"}}', "topics are a JSON str"),
    ('{"topic_list": {"topics": {"0": {}}}}', "topics are a JSON dict"),
    ('{"topic_list": {"topics": [1, "x", null]}}', "all 3 topics are malformed"),
    ('{"topic_list": {"topics": [{"id": 1' + "0" * 5000 + ', "title": "t"}]}}', "not valid JSON"),
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
    ('{"a":[' * 50_000 + "]}" * 50_000, "nested too deeply"),
])
def test_refusals(text: str, message: str):
    with pytest.raises(NotAListError, match="expected a Discourse topic list in JSON") as caught:
        parse_json_listing(text, base_url=BASE)
    assert message in str(caught.value)


def test_refuses_oversize_and_non_utf8():
    with pytest.raises(NotAListError, match=f"limit {MAX_TEXT_CHARS}"):
        parse_json_listing("{" + " " * MAX_TEXT_CHARS + "}", base_url=BASE)
    with pytest.raises(NotAListError, match="not UTF-8"):
        parse_json_listing(b'{"topic_list": {"topics": []}, "x": "\xff"}', base_url=BASE)


def test_refuses_a_base_that_is_not_a_web_url():
    with pytest.raises(NotAListError, match="base URL"):
        parse_json_listing(page(topic_json()), base_url="forum.example.org")


def test_empty_and_missing_topics_are_an_empty_list():
    assert parse_json_listing('{"topic_list": {}}', base_url=BASE).topics == ()
    empty = parse_json_listing(page(), base_url=BASE)
    assert (empty.topics, empty.skipped, empty.next_page_url, empty.dialect) == ((), 0, None, "json")


def test_a_malformed_topic_is_skipped_and_counted():
    listing = parse_json_listing(page(topic_json(), topic_json(id="8"), [], topic_json(id=9)), base_url=BASE)
    assert [t.id for t in listing.topics] == [7, 9]
    assert listing.skipped == 2


def test_left_out_topics_are_not_counted_as_malformed():
    listing = parse_json_listing(page(topic_json(visible=False), topic_json(id=8, archetype="private_message"),
                                      topic_json(id=9, visible=None), topic_json(id=10)), base_url=BASE)
    assert [t.id for t in listing.topics] == [9, 10]
    assert listing.skipped == 0


HOSTILE = [None, "x", "", 1.5, -1, 0, True, False, [], {}, [None], {"a": 1}, 10**30, "1", "2026-13-45T99:99:99Z",
           float("inf"), "\ud800", "\x00"]
FIELDS = ["slug", "posts_count", "reply_count", "created_at", "last_posted_at", "bumped_at", "excerpt", "visible",
          "archetype", "category_id", "tags", "pinned", "posters", "fancy_title", "unicode_title"]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_wrong_types_in_optional_fields_keep_the_topic(field: str, value: object):
    raw = topic_json(**{field: value})
    listing = parse_json_listing(page(raw), base_url=BASE)
    left_out = (field == "visible" and value is False) or (field == "archetype" and value != "regular")
    assert len(listing.topics) == (0 if left_out else 1) and listing.skipped == 0
    for topic in listing.topics:
        assert topic.url.startswith(f"{BASE}/t/") and topic.url.endswith("/7")
        assert topic.replies is None or (type(topic.replies) is int and topic.replies >= 0)
        assert all(isinstance(tag, str) and tag for tag in topic.tags)
        assert topic.category_id is None or type(topic.category_id) is int
        assert topic.created_at is None or topic.created_at.tzinfo is not None


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_wrong_ids_skip_the_topic(value: object):
    listing = parse_json_listing(page(topic_json(id=value), topic_json(id=8)), base_url=BASE)
    assert [t.id for t in listing.topics] == [8]
    assert listing.skipped == 1


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_wrong_titles_fall_back_to_fancy_title_or_skip(value: object):
    listing = parse_json_listing(page(topic_json(title=value, fancy_title="Caf&eacute;"), topic_json(id=8,
                                      title=value)), base_url=BASE)
    if isinstance(value, str):  # a lone surrogate is U+FFFD (test_lone_surrogate_escapes_are_…)
        assert [t.title for t in listing.topics] == [value.strip().replace("\ud800", "\ufffd")] * 2
    else:
        assert [t.title for t in listing.topics] == ["Café"] and listing.skipped == 1


def test_a_title_with_emoji_shortcodes_is_read_as_the_forum_shows_it():
    """Core sends `unicode_title`, the title with its emoji as characters, beside a title holding a `:shortcode:`
    (`ListableTopicSerializer#include_unicode_title?`): the list's feeds wrote `:tada:` where the forum, and
    the topic's own post feed, show 🎉."""
    listing = parse_json_listing(page(topic_json(title="Release party :tada: for 2.6",
                                                 unicode_title="Release party 🎉 for 2.6"),
                                      topic_json(id=8, title="No emoji here", unicode_title="  ")), base_url=BASE)
    assert [t.title for t in listing.topics] == ["Release party 🎉 for 2.6", "No emoji here"]


@pytest.mark.parametrize("users", HOSTILE + [[{"id": "1", "username": "alice"}], [{"id": 1, "username": 5}]],
                         ids=repr)
def test_wrong_users_give_no_author(users: object):
    topic = parse_json_listing(page(topic_json(), users=users), base_url=BASE).topics[0]
    assert topic.author is None and topic.author_url is None


def test_posters_without_users_fall_back_to_an_embedded_user():
    raw = topic_json(posters=[{"description": "Original Poster", "user": {"id": 3, "username": "bo b"}}])
    topic = parse_json_listing(page(raw, users=[]), base_url=BASE).topics[0]
    assert (topic.author, topic.author_url) == ("bo b", f"{BASE}/u/bo%20b")


def test_author_url_segment_is_percent_encoded():
    raw = topic_json(posters=[{"description": "Original Poster", "user_id": 1}])
    topic = parse_json_listing(page(raw, users=[{"id": 1, "username": "../admin?x=1#y"}]), base_url=BASE).topics[0]
    assert topic.author_url == f"{BASE}/u/..%2Fadmin%3Fx%3D1%23y"


def test_replies_come_from_posts_count_then_reply_count():
    listing = parse_json_listing(page(topic_json(posts_count=5, reply_count=1),
                                      topic_json(id=8, posts_count=None, reply_count=2),
                                      topic_json(id=9, posts_count=0, reply_count=None)), base_url=BASE)
    assert [t.replies for t in listing.topics] == [4, 2, None]


@pytest.mark.parametrize(("more", "base", "expected"), [
    ("/latest?page=1", BASE, f"{BASE}/latest?page=1"),
    ("/latest.json?page=1", BASE, f"{BASE}/latest.json?page=1"),
    ("/forum/c/x/5?page=2", "https://example.com/forum", "https://example.com/forum/c/x/5?page=2"),
    ("/c/x/5?page=2", "https://example.com/forum", "https://example.com/forum/c/x/5?page=2"),
    (f"{BASE}/latest?page=1", BASE, f"{BASE}/latest?page=1"),
    ("https://evil.example/latest?page=1", BASE, None),
    (f"{BASE}.evil.example/latest?page=1", BASE, None),
    ("//evil.example/latest", BASE, None),
    ("javascript:alert(1)", BASE, None),
    ("latest?page=1", BASE, None),
    ("/latest page=1", BASE, None),
    ("", BASE, None),
    (None, BASE, None),
    (5, BASE, None),
    (["/latest?page=1"], BASE, None),
])
def test_next_page_url_stays_on_the_forum(more: object, base: str, expected: str | None):
    assert parse_json_listing(page(topic_json(), more_topics_url=more), base_url=base).next_page_url == expected


@pytest.mark.parametrize(("source", "number"), [
    (None, 0), (f"{BASE}/latest.json", 0), (f"{BASE}/latest.json?page=3", 3), (f"{BASE}/latest.json?page=x", 0),
    (f"{BASE}/latest.json?page=²", 0), (f"{BASE}/latest.json?page=" + "9" * 50, 0),
])
def test_page_number_comes_from_the_source_url(source: str | None, number: int):
    assert parse_json_listing(page(topic_json()), base_url=BASE, source_url=source).page == number


def test_excerpts_are_plain_text():
    raw = topic_json(pinned=True, excerpt="<b>Bold</b>&nbsp;and &lt;b&gt; &amp;amp;\n\n<img src=x onerror=y>end")
    topic = parse_json_listing(page(raw), base_url=BASE).topics[0]
    assert topic.excerpt == "Bold and <b> &amp; end"


def test_tags_are_names_from_strings_or_objects_once_each():
    raw = topic_json(tags=["a", {"id": 1, "name": "b", "slug": "b"}, {"name": "日記", "slug": ""}, {"slug": "c"},
                           " a ", 3, None])
    assert parse_json_listing(page(raw), base_url=BASE).topics[0].tags == ("a", "b", "日記")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=30,
)
KEYS = st.sampled_from(["id", "title", "fancy_title", "slug", "posts_count", "reply_count", "created_at",
                        "last_posted_at", "bumped_at", "excerpt", "visible", "archetype", "category_id", "tags",
                        "pinned", "posters"])
VALUE = JSON | st.integers(min_value=1, max_value=10**6) | st.just("2026-10-01T10:00:00Z") | st.just("regular")
TOPIC = st.dictionaries(KEYS, VALUE, max_size=16)
POSTER = st.fixed_dictionaries({"user_id": st.integers(-2, 5) | JSON, "description": st.text(max_size=30) | JSON})
USERS = st.lists(st.fixed_dictionaries({"id": st.integers(-2, 5) | JSON, "username": st.text(max_size=10) | JSON}),
                 max_size=6) | JSON


def check(text: str) -> None:
    """The property: a `Listing` of well-typed topics on the forum, or `NotAListError`; nothing else."""
    try:
        listing = parse_json_listing(text, base_url=BASE)
    except NotAListError:
        return
    for topic in listing.topics:
        assert type(topic.id) is int and topic.id > 0 and isinstance(topic.title, str)
        assert topic.url.startswith(f"{BASE}/t/")
        assert topic.author is None or (isinstance(topic.author, str) and topic.author_url.startswith(f"{BASE}/u/"))
        assert isinstance(topic.tags, tuple) and all(isinstance(tag, str) for tag in topic.tags)
    assert listing.next_page_url is None or listing.next_page_url.startswith(f"{BASE}/")


@given(JSON)
def test_any_json_value_is_a_listing_or_refused(value: object):
    check(json.dumps(value))
    check(json.dumps({"topic_list": value}))
    check(json.dumps({"topic_list": {"topics": value, "more_topics_url": value}, "users": value}))


@given(st.lists(TOPIC | JSON, max_size=6), USERS, st.lists(POSTER, max_size=3))
def test_near_miss_pages_are_a_listing_or_refused(topics: list, users: object, posters: list):
    for topic in topics:
        if isinstance(topic, dict) and "posters" not in topic:
            topic["posters"] = posters
    check(json.dumps({"users": users, "topic_list": {"topics": topics}}))


def test_topic_page_of_a_2013_release():
    topic = parse_topic_head((FIXTURES / "api-gem-2013-topic.json").read_text(encoding="utf-8"))
    assert (topic.id, topic.category_id, topic.tags) == (57, 13, ())
    assert topic.created_at == datetime(2013, 2, 4, 20, 26, 25, 977000, tzinfo=UTC)
    assert topic.first_post_html.startswith("<p>Welcome!</p>") and "</ul>" in topic.first_post_html


def test_topic_page_of_a_current_release_keeps_the_cooked_html_raw():
    topic = parse_topic_head((FIXTURES / "current-topic.json").read_bytes())
    assert topic.tags == ("compiler", "讨论")
    assert "<script>alert(1)</script>" in topic.first_post_html  # feedbridge.render.sanitize's nh3 cleaner removes it
    assert topic.created_at == datetime(2026, 9, 20, 9, 59, 59, 500000, tzinfo=UTC)


def test_topic_page_that_does_not_start_at_the_first_post():
    text = json.dumps({"id": 5, "post_stream": {"posts": [{"post_number": 21, "cooked": "<p>later</p>",
                                                            "created_at": "2026-01-01T00:00:00Z"}]}})
    topic = parse_topic_head(text)
    assert (topic.first_post_html, topic.created_at) == (None, None)


@pytest.mark.parametrize("text", ["<html><body>Log in</body></html>", '{"errors": ["not found"]}',
                                  '{"id": "5", "post_stream": {}}', '{"id": 5, "post_stream": []}', "[]"])
def test_topic_page_refusals(text: str):
    with pytest.raises(NotATopicError, match="expected a Discourse topic in JSON"):
        parse_topic_head(text)


@given(JSON)
def test_any_json_value_is_a_topic_or_refused(value: object):
    for text in (json.dumps(value), json.dumps({"id": 1, "post_stream": value}),
                 json.dumps({"id": 1, "post_stream": {"posts": value}, "tags": value, "created_at": value})):
        try:
            topic = parse_topic_head(text)
        except NotATopicError:
            continue
        assert topic.first_post_html is None or isinstance(topic.first_post_html, str)


def test_categories_of_a_2013_release():
    # The capture's first category has a misspelt "name" key: its slug stands in, as in the Markdown directory.
    assert parse_json_categories((FIXTURES / "api-gem-2013-categories.json").read_text(encoding="utf-8")) == (
        Category("test1", "test1", 1, "Test category #1."),
        Category("test2", "test2", 2, "Test category #2."),
        Category("test3", "test3", 3, "Test category #3."),
    )


def test_categories_of_a_current_release_with_subcategories():
    found = parse_json_categories((FIXTURES / "current-categories.json").read_text(encoding="utf-8"))
    assert found == (
        Category("Compiler", "compiler", 5, "torch.compile, Dynamo and Inductor.", ()),
        Category("Hardware", "hardware", 3, "Boards, chips and boxes.", (12,)),
        Category("GPU", "hardware/gpu", 12, "Graphics cards & drivers.", ()),
        Category("Orphan child", "orphan", 40, "Its parent is private.", ()),
        Category("unnamed", "unnamed", 6, "", ()),
    )
    assert found[2].value == "hardware/gpu/12"


def test_subcategory_listed_beside_its_parent_and_parent_cycles():
    text = json.dumps({"category_list": {"categories": [
        {"id": 2, "name": "Child", "slug": "child", "parent_category_id": 1},
        {"id": 1, "name": "Parent", "slug": "parent", "description": "<p>Tom &amp; Jerry</p>"},
        {"id": 3, "name": "Loop", "slug": "loop", "parent_category_id": 4},
        {"id": 4, "name": "Pool", "slug": "pool", "parent_category_id": 3},
    ]}})
    assert [(c.slugs, c.description) for c in parse_json_categories(text)] == [
        ("parent/child", ""), ("parent", "Tom & Jerry"), ("pool/loop", ""), ("loop/pool", "")]


@pytest.mark.parametrize("text", ["", "<html>", "[]", '{"category_list": []}', '{"category_list": {"categories": 1}}',
                                  '{"a":' * 100_000 + "1" + "}" * 100_000])
def test_categories_that_are_not_a_directory_give_none(text: str):
    assert parse_json_categories(text) == ()


@given(JSON)
def test_any_json_value_is_a_directory_or_empty(value: object):
    for text in (json.dumps({"category_list": {"categories": value}}),
                 json.dumps({"category_list": {"categories": [value, {"id": 1, "slug": "a", "name": value}]}})):
        assert all(isinstance(c, Category) and c.slugs for c in parse_json_categories(text))


def test_lone_surrogate_escapes_are_replacement_characters_in_every_field():
    """`json.loads` keeps `"\\ud800"` as a string with no UTF-8 form, which made the `.html` view, nh3 and the
    Redis codec raise far from here: every string read is made whole where it is read, keys too."""
    raw = topic_json(title="T\ud800", slug="a\ud800b", excerpt="e\udfff", pinned=True, tags=["x\udc00", {"name": "y\ud800"}],
                     posters=[{"description": "Original Poster", "user_id": 1}])
    listing = parse_json_listing(page(raw, users=[{"id": 1, "username": "x\udfff"}], title="L\ud800"), base_url=BASE)
    topic = listing.topics[0]
    assert (listing.title, topic.title, topic.excerpt, topic.tags) == ("L\ufffd", "T\ufffd", "e\ufffd",
                                                                         ("x\ufffd", "y\ufffd"))
    assert (topic.author, topic.url, topic.author_url) == ("x\ufffd", f"{BASE}/t/a%EF%BF%BDb/7", f"{BASE}/u/x%EF%BF%BD")
    head = parse_topic_head(json.dumps({"id": 7, "title": "T\ud800", "\ud800": {"\udfff": ["\ud800"]},
                                        "post_stream": {"posts": [{"post_number": 1, "cooked": "<p>c\ud800</p>"}]}}))
    assert (head.title, head.first_post_html) == ("T\ufffd", "<p>c\ufffd</p>")
    # a valid pair is one character, as json.loads read it
    assert parse_json_listing(page(topic_json(title="\ud83d\ude00")), base_url=BASE).topics[0].title == "\U0001f600"


def test_a_topic_keeps_its_first_hundred_tags_in_one_pass():
    """A JSON list with 100,000 distinct tags on one topic held a gevent worker until gunicorn killed it: each
    tag was looked for in the list of those before it. The first `MAX_TAGS` are kept, each once, in order
    (core's own bound, `max_tags_per_topic`, is 5 by default; RELIABILITY.md row 72)."""
    from feedbridge.discourse.fields import MAX_TAGS

    tags = [f"tag-{n}" for n in range(20_000)]
    listing = parse_json_listing(page(topic_json(tags=[" tag-0 ", "tag-0", *tags])), base_url=BASE)
    assert listing.topics[0].tags == tuple(tags[:MAX_TAGS])
    objects = [{"id": n, "name": name, "slug": name} for n, name in enumerate(tags)]
    assert parse_json_listing(page(topic_json(tags=objects)), base_url=BASE).topics[0].tags == tuple(tags[:MAX_TAGS])
