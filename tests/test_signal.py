"""Issue 26 over a real socket: thresholds, tags any/all/exclude, exclude_category, the tag intersection
route and digests, on a Markdown forum (that also serves its JSON lists, as real ones do) and a JSON one.

What each feed should hold is worked out here from the fake forum's own JSON list (`like_count`, `views`,
`posts_count`, tags, category ids), never from the bridge's parsers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta
from typing import Any

import feedparser
import httpx
import pytest

from feedbridge.config import Settings, parse_forum
from feedbridge.discourse.json_pages import parse_json_categories
from feedbridge.errors import BuildConfigError, DecodeError
from feedbridge.feeds.request.spec import parse_feed_request
from feedbridge.feeds.select.subcategories import MAX_PARENTS
from feedbridge.models import Category
from feedbridge.staticsite.plan import load_build_config
from feedbridge.store import codec
from feedbridge.store.entries import DirectoryEntry
from tests.appserver import RunningApp, running_app, settings_for
from tests.test_cli import SEED, run
from tests.test_render import assert_json_feed_1_1
from tests.upstream import JSON_ROOT, PROJECT_ROOT, FakeForum, list_reads, with_figures

SOURCES = ("markdown", "json")
Raw = dict[str, Any]


@pytest.fixture(params=SOURCES)
def forum(request: pytest.FixtureRequest) -> Iterator[FakeForum]:
    with FakeForum(mode=request.param, json_lists=True) as fake:
        yield fake


@pytest.fixture
def app(forum: FakeForum) -> Iterator[RunningApp]:
    with running_app(settings_for(forum.url)) as running:
        yield running


def parsed(body: bytes) -> feedparser.FeedParserDict:
    """As tests/test_validity.py checks feeds: feedparser finds nothing wrong."""
    result = feedparser.parse(body)
    assert result.bozo == 0, result.get("bozo_exception")
    return result


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=30)


def raw_topics(path: str = "latest.json") -> list[Raw]:
    return list(with_figures(json.loads((JSON_ROOT / path).read_text(encoding="utf-8")))["topic_list"]["topics"])


def tags(raw: Raw) -> set[str]:
    return {t["name"] for t in raw["tags"]}


def ids(app: RunningApp, path: str) -> set[int]:
    response = get(app.feed_url(path))
    assert response.status_code == 200, response.text
    feed = response.json()
    assert_json_feed_1_1(feed)
    return {int(item["id"].rsplit("/", 1)[1]) for item in feed["items"]}


def expected(keep: Callable[[Raw], bool], path: str = "latest.json") -> set[int]:
    found = {t["id"] for t in raw_topics(path) if keep(t)}
    assert found and found != {t["id"] for t in raw_topics(path)}, "a filter the fixtures cannot tell apart"
    return found


# --- thresholds ------------------------------------------------------------------------------------------

THRESHOLDS = [
    ("min_replies=20", lambda t: t["posts_count"] - 1 >= 20),
    ("min_likes=12", lambda t: t["like_count"] >= 12),
    ("min_views=900", lambda t: t["views"] >= 900),
    ("min_replies=10&min_likes=5&min_views=600",
     lambda t: t["posts_count"] - 1 >= 10 and t["like_count"] >= 5 and t["views"] >= 600),
]


@pytest.mark.parametrize(("query", "keep"), THRESHOLDS, ids=[q for q, _ in THRESHOLDS])
def test_thresholds_keep_topics_with_at_least_that_many(app, forum, query, keep):
    assert ids(app, f"/latest.json?{query}") == expected(keep)


def test_replies_are_posts_count_minus_one_not_reply_count(app):
    # reply_count is posts_count - 2 in the fixtures: a topic with exactly n replies tells them apart.
    n = sorted(t["posts_count"] - 1 for t in raw_topics())[15]
    assert ids(app, f"/latest.json?min_replies={n}") == expected(lambda t: t["posts_count"] - 1 >= n)
    assert ids(app, f"/latest.json?min_replies={n}") != expected(lambda t: t["reply_count"] >= n)


def test_markdown_list_reads_the_json_list_of_the_same_page_once():
    with FakeForum(json_lists=True) as fake, running_app(settings_for(fake.url)) as app:
        assert ids(app, "/latest.json?min_likes=12") == expected(lambda t: t["like_count"] >= 12)
        assert ids(app, "/latest.json?min_views=900") == expected(lambda t: t["views"] >= 900)
        assert ids(app, "/latest.json?min_replies=20&pages=2") == expected(lambda t: t["posts_count"] >= 21) | {
            t["id"] for t in raw_topics("latest/page-1.json") if t["posts_count"] >= 21}
        assert fake.count("/latest.json") == 1  # cached like any page, for every threshold after the first
        assert fake.count("/latest.json?page=1") == 0  # replies are on the Markdown list itself
        assert not [r for r in fake.requests if r.path.startswith("/t/")]


def test_json_forum_filters_cost_no_request_beyond_the_list(upstream_json):
    with running_app(settings_for(upstream_json.url)) as app:
        assert ids(app, "/latest.json?min_likes=5&min_views=300&exclude_tag=rfc&tag=gpu+cuda&min_replies=1")
    assert sorted(r.path for r in list_reads(upstream_json.requests)) == ["/categories.json", "/latest.json",
                                                                          "/latest.md"]


REFUSED = ["min_likes=1", "min_views=1", "exclude_tag=gpu", "exclude_category=11", "tag=gpu+cuda"]


@pytest.mark.parametrize("query", REFUSED)
def test_markdown_forum_refusing_its_json_list_answers_400_naming_the_parameter(upstream, query):
    with running_app(settings_for(upstream.url)) as app:
        response = get(app.feed_url(f"/latest.atom?{query}"))
    assert response.status_code == 400
    assert query.split("=")[0] in response.text and "JSON list" in response.text
    assert upstream.count("/latest.json") == 1


def test_the_forum_budget_refuses_the_json_list_a_markdown_feed_needs_and_no_feed_goes_unfiltered():
    # A budget of 3 a minute is one request per client: the Markdown list, and not its JSON list.
    with FakeForum(json_lists=True) as fake, running_app(settings_for(fake.url, forum_budget=3)) as app:
        for _ in range(2):
            refused = get(app.feed_url("/latest.atom?min_likes=12"))
            assert refused.status_code == 503 and int(refused.headers["Retry-After"]) > 0
            assert "share" in refused.text and "<entry>" not in refused.text
        assert [r.target for r in fake.requests] == ["/latest.md"]  # nothing sent past the budget
        assert parsed(get(app.feed_url("/latest.atom")).content).entries  # that list itself, from the cache
        assert fake.count() == 1


def test_markdown_forum_without_json_lists_still_filters_on_replies(upstream):
    with running_app(settings_for(upstream.url)) as app:
        assert ids(app, "/latest.json?min_replies=20") == expected(lambda t: t["posts_count"] >= 21)
    assert not [r for r in list_reads(upstream.requests) if r.path.endswith(".json")]


# --- tags and categories -----------------------------------------------------------------------------------

# Any-of tags on a Markdown list are read from each topic's page, as before this issue (tests/test_full_content.py).
ANY_TAGS = [
    ("tag=gpu,cuda", lambda t: bool(tags(t) & {"gpu", "cuda"})),
    ("tag=cuda&tag=rfc", lambda t: bool(tags(t) & {"cuda", "rfc"})),
]
TAGS = [
    ("tag=gpu+cuda", lambda t: {"gpu", "cuda"} <= tags(t)),  # a literal + arrives as a space
    ("tag=cuda%2Bgpu", lambda t: {"gpu", "cuda"} <= tags(t)),  # an encoded one as +
    ("exclude_tag=cuda", lambda t: "cuda" not in tags(t)),
    ("exclude_tag=cuda,rfc", lambda t: not tags(t) & {"cuda", "rfc"}),
    ("exclude_tag=cuda&exclude_tag=rfc", lambda t: not tags(t) & {"cuda", "rfc"}),
    ("tag=gpu&exclude_tag=cuda", lambda t: tags(t) == {"gpu"}),
    ("exclude_category=12", lambda t: t["category_id"] != 12),
    ("exclude_category=5&exclude_category=6", lambda t: t["category_id"] not in (5, 6)),
    ("exclude_category=11", lambda t: t["category_id"] not in (11, 12)),  # gpu (12) is hardware's (11)
]


@pytest.mark.parametrize(("query", "keep"), TAGS, ids=[q for q, _ in TAGS])
def test_tags_all_exclude_and_excluded_categories(app, forum, query, keep):
    assert ids(app, f"/latest.json?{query}") == expected(keep)


@pytest.mark.parametrize("forum", ["json"], indirect=True)
@pytest.mark.parametrize(("query", "keep"), ANY_TAGS, ids=[q for q, _ in ANY_TAGS])
def test_any_of_tags_comma_separated_or_repeated(app, forum, query, keep):
    assert ids(app, f"/latest.json?{query}") == expected(keep)


def targets(forum: FakeForum, prefix: str) -> list[str]:
    return sorted(r.target for r in forum.requests if r.target.startswith(prefix))


def test_excluding_a_parent_reads_the_directory_once(app, forum):
    """The directory asked for every subcategory (`include_subcategories=true`) names every level's children,
    nested in JSON and by `Parent:` lines in Markdown: excluding a parent costs that one request, cached."""
    assert ids(app, "/latest.json?exclude_category=11") == expected(lambda t: t["category_id"] not in (11, 12))
    assert ids(app, "/latest.json?exclude_category=11&min_likes=1") == expected(
        lambda t: t["category_id"] not in (11, 12) and t["like_count"] >= 1)
    suffix = ".md" if forum.mode == "markdown" else ".json"
    assert targets(forum, "/categories") == [f"/categories{suffix}?include_subcategories=true"]


GRAPHS = 13  # gpu's child (fixtures/nested-categories), a third level


def every_category() -> list[Raw]:
    """The fixture directory's categories at every level, flat, without what a release may leave out
    (`subcategory_list`, `subcategory_ids`): what a test builds another release's directory from."""
    def flat(categories: list[Raw]) -> list[Raw]:
        return [found for c in categories for found in (c, *flat(c.get("subcategory_list", [])))]
    document = json.loads((JSON_ROOT / "categories.json").read_text(encoding="utf-8"))
    return [{k: v for k, v in c.items() if k not in ("subcategory_list", "subcategory_ids", "has_children")}
            for c in flat(document["category_list"]["categories"])]


def serve_directory(forum: FakeForum, categories: list[Raw]) -> None:
    forum.set_body("/categories.json", json.dumps({"category_list": {"categories": categories}}))


def older_directory(forum: FakeForum) -> None:
    """A release from before `include_subcategories` and `subcategory_ids`: the first two levels listed flat,
    no third (graphs), in JSON; in Markdown, no `Parent:` lines either."""
    serve_directory(forum, [c for c in every_category() if c["id"] != GRAPHS])
    markdown = (PROJECT_ROOT / "fixtures" / "site" / "categories.md").read_text(encoding="utf-8")
    head, *blocks = markdown.split("\n\n## ")
    forum.set_body("/categories.md", "\n\n## ".join([head, *(b.split("\n\nParent: ")[0] for b in blocks
                                                               if "/graphs/" not in b.partition("\n")[0])]))


def in_graphs(forum: FakeForum) -> list[Raw]:
    """The JSON list with a third of the gpu topics moved to graphs, served from now on (a Markdown list
    carries no category ids: its JSON list of the same page says where each topic is)."""
    document = json.loads((JSON_ROOT / "latest.json").read_text(encoding="utf-8"))
    gpu = [t for t in document["topic_list"]["topics"] if t["category_id"] == 12]
    for topic in gpu[::3]:
        topic["category_id"] = GRAPHS
    forum.set_body("/latest.json", json.dumps(document))
    return list(with_figures(document)["topic_list"]["topics"])


def kept_ids(listed: list[Raw], dropped: set[int]) -> set[int]:
    found = {t["id"] for t in listed if t["category_id"] not in dropped}
    assert {t["category_id"] for t in listed} & dropped and found, "a filter the fixtures cannot tell apart"
    return found


def test_excluding_a_category_drops_its_grandchildren_from_the_directory(app, forum):
    """core nests three deep; the directory with every subcategory names the third level: no lookup."""
    listed = in_graphs(forum)
    assert ids(app, "/latest.json?exclude_category=11") == kept_ids(listed, {11, 12, GRAPHS})
    assert ids(app, "/latest.json?exclude_category=12") == kept_ids(listed, {12, GRAPHS})
    assert ids(app, "/latest.json?exclude_category=11&min_replies=1") <= kept_ids(listed, {11, 12, GRAPHS})
    assert targets(forum, "/categories.json?parent_category_id") == []


def test_an_older_directory_has_the_grandchildren_read_from_parent_category_id(app, forum):
    older_directory(forum)
    listed = in_graphs(forum)
    assert ids(app, "/latest.json?exclude_category=11") == kept_ids(listed, {11, 12, GRAPHS})
    assert ids(app, "/latest.json?exclude_category=12") == kept_ids(listed, {12, GRAPHS})
    # The directory shows the second level, so only gpu is asked for its children: once, then cached.
    assert targets(forum, "/categories.json?parent_category_id") == ["/categories.json?parent_category_id=12"]


@pytest.mark.parametrize("forum", ["json"], indirect=True)
def test_a_directory_of_top_level_categories_only_asks_each_level_below(app, forum):
    serve_directory(forum, [c for c in every_category() if "parent_category_id" not in c])  # no subcategory_ids
    listed = in_graphs(forum)
    assert ids(app, "/latest.json?exclude_category=11") == kept_ids(listed, {11, 12, GRAPHS})
    assert ids(app, "/latest.json?exclude_category=6") == kept_ids(listed, {6})  # a leaf: an empty answer
    assert targets(forum, "/categories.json?parent_category_id") == [
        f"/categories.json?parent_category_id={n}" for n in (11, 12, 6)]


CPU = 14  # a second-level leaf beside gpu, in the directories below only


def directory_with_ids(forum: FakeForum, shape: str) -> None:
    """Serve the directory and hardware's children as current releases do, each category with its
    `subcategory_ids`: hardware has gpu (which has graphs) and cpu (a leaf). "beside" lists the second level
    next to the first, as forums that page their categories do; "top" the first level only, as others do."""
    categories = [c for c in every_category() if c["id"] != GRAPHS]
    categories.append({"id": CPU, "name": "cpu", "slug": "cpu", "parent_category_id": 11})
    children = {11: [12, CPU], 12: [GRAPHS]}
    for category in categories:
        category["subcategory_ids"] = children.get(category["id"], [])
    below = [c for c in categories if c.get("parent_category_id") == 11]
    serve_directory(forum, [c for c in categories if shape == "beside" or "parent_category_id" not in c])
    forum.set_body("/categories.json?parent_category_id=11", json.dumps({"category_list": {"categories": below}}))


@pytest.mark.parametrize("forum", ["json"], indirect=True)
@pytest.mark.parametrize(("shape", "asked"), [("beside", [12]), ("top", [11, 12, CPU])])
def test_subcategory_ids_cost_one_lookup_per_parent_with_subcategories(app, forum, shape, asked):
    directory_with_ids(forum, shape)
    listed = in_graphs(forum)
    assert ids(app, "/latest.json?exclude_category=11") == kept_ids(listed, {11, 12, GRAPHS, CPU})
    assert ids(app, "/latest.json?exclude_category=12") == kept_ids(listed, {12, GRAPHS})
    assert ids(app, "/latest.json?exclude_category=6") == kept_ids(listed, {6})
    assert ids(app, f"/latest.json?exclude_category={CPU}&exclude_category=5") == {t["id"] for t in listed
                                                                                    if t["category_id"] != 5}
    # Each parent is asked once, then cached, and no leaf the directory lists: "top", which lists neither gpu
    # nor cpu, also asks for cpu when cpu is excluded by itself.
    assert targets(forum, "/categories.json?parent_category_id") == [
        f"/categories.json?parent_category_id={n}" for n in asked]


def test_subcategory_ids_are_shared_through_the_store_and_only_when_whole():
    """A directory read from Redis by another worker must still spare the lookups; a forged or partial
    list must not pass for the whole one, which would hide the children it lost."""
    document = {"category_list": {"categories": [
        {"id": 11, "slug": "hardware", "subcategory_ids": [12, 14]}, {"id": 5, "slug": "compiler", "subcategory_ids": []},
        {"id": 6, "slug": "distributed", "subcategory_ids": [7, "8"]}, {"id": 1, "slug": "general"}]}}
    found = parse_json_categories(json.dumps(document))
    assert [c.subcategory_ids for c in found] == [(12, 14), (), None, None]
    entry = DirectoryEntry(found, 1_800_000_000.0)
    assert codec.decode(codec.encode(entry)) == entry
    with pytest.raises(DecodeError):
        codec.decode(codec.encode(DirectoryEntry((Category("gpu", "hardware/gpu", 12, "", ("13",)),), 1.0)))


def test_a_forum_that_ignores_parent_category_id_adds_no_subcategories(app, forum):
    older_directory(forum)
    forum.set_body("/categories.json?parent_category_id=12",
                   json.dumps({"category_list": {"categories": every_category()}}))
    listed = in_graphs(forum)
    assert ids(app, "/latest.json?exclude_category=11") == kept_ids(listed, {11, 12})


@pytest.mark.parametrize("forum", ["json"], indirect=True)
def test_subcategory_lookups_stop_at_their_cap_with_a_400(app, forum):
    serve_directory(forum, [c for c in every_category() if "parent_category_id" not in c])
    in_graphs(forum)
    excluded = [n for n in range(1, 22) if n != 12]  # twenty, each asked; hardware's answer names a 21st
    response = get(app.feed_url("/latest.atom?exclude_category=" + ",".join(map(str, excluded))))
    assert response.status_code == 400 and "exclude_category" in response.text and "20" in response.text
    asked = targets(forum, "/categories.json?parent_category_id")
    assert len(asked) == MAX_PARENTS and "/categories.json?parent_category_id=12" not in asked  # gpu, the 21st


def test_tag_intersection_route_reads_discourses_own_list(app, forum):
    both = expected(lambda t: {"gpu", "cuda"} <= tags(t), "tag/gpu.json")
    assert ids(app, "/tag/gpu+cuda.json") == both
    feed = parsed(get(app.feed_url("/tag/gpu+cuda.atom")).content)
    assert "gpu+cuda" in feed.feed.title and feed.feed.link.endswith("/tags/intersection/gpu/cuda")
    assert forum.count("/tags/intersection/gpu/cuda.json") == 1
    assert forum.count("/tag/gpu.json") == forum.count("/tag/gpu.md") == 0


def test_tag_intersection_route_filters_the_first_tags_list_where_the_forum_has_none(app, forum):
    forum.fail("/tags/intersection/gpu/cuda.json", 404)
    assert ids(app, "/tag/gpu+cuda.json") == expected(lambda t: {"gpu", "cuda"} <= tags(t), "tag/gpu.json")
    assert forum.count("/tag/gpu.json") == 1


# --- combinations -------------------------------------------------------------------------------------------

def test_every_filter_at_once_and_with_author_q_category_pages(app):
    def keep(t: Raw) -> bool:
        return (t["posts_count"] - 1 >= 5 and t["like_count"] >= 3 and t["views"] >= 300
                and "cuda" not in tags(t) and t["category_id"] != 6)
    assert ids(app, "/latest.json?min_replies=5&min_likes=3&min_views=300&exclude_tag=cuda&exclude_category=6"
                    "&pages=2") == {t["id"] for t in raw_topics() + raw_topics("latest/page-1.json") if keep(t)}
    jansel = expected(lambda t: keep(t) and t["category_id"] == 5, "c/compiler/5.json")
    found = ids(app, "/c/compiler/5.json?min_replies=5&min_likes=3&min_views=300&exclude_tag=cuda&content=full")
    assert found == jansel
    feed = get(app.feed_url("/latest.json?min_likes=3&exclude_tag=cuda&tag=gpu&author=desertfire&q=lessons"))
    items = feed.json()["items"]
    assert items and all("lessons" in i["title"].lower() and i["author"]["name"] == "desertfire" for i in items)
    assert "likes ≥ 3" in feed.json()["title"] and "without tag: cuda" in feed.json()["description"]


# --- invalid values ------------------------------------------------------------------------------------------

INVALID = [
    ("min_replies=-1", "min_replies"), ("min_replies=abc", "min_replies"), ("min_likes=1.5", "min_likes"),
    ("min_views=1000000001", "min_views"), ("min_likes=1&min_likes=2", "min_likes"),
    ("exclude_category=abc", "exclude_category"), ("exclude_category=0", "exclude_category"),
    ("exclude_category=" + ",".join(map(str, range(1, 23))), "exclude_category"),
    ("exclude_tag=a/b", "exclude_tag"), ("tag=a%2Bb,c", "tag"), ("tag=a+b&tag=c", "tag"), ("tag=a+b/c", "tag"),
    ("digest=monthly", "digest"), ("digest=daily&digest=weekly", "digest"), ("digest=daily&limit=0", "limit"),
]


@pytest.mark.parametrize(("query", "name"), INVALID, ids=[q for q, _ in INVALID])
def test_invalid_values_answer_400_naming_the_parameter(upstream, query, name):
    with running_app(settings_for(upstream.url)) as app:
        response = get(app.feed_url(f"/latest.atom?{query}"))
    assert response.status_code == 400 and name in response.text
    assert upstream.count("/latest.json") == 0


@pytest.mark.parametrize("path", ["/tag/gpu+cuda/7.atom", "/tag/gpu++cuda.atom", "/tag/a+b+c+d+e+f.atom"])
def test_malformed_intersections_are_not_routes(upstream, path):
    with running_app(settings_for(upstream.url)) as app:
        assert get(app.feed_url(path)).status_code == 404


# --- canonical query: every parameter names its own feed ----------------------------------------------------

SETTINGS = Settings(forums=(parse_forum("https://forum.example.org"),))


def spec(query: str, path: str = "latest.atom"):  # noqa: ANN201 (a FeedSpec)
    values: dict[str, list[str]] = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        values.setdefault(key, []).append(value.replace("%2B", "+"))
    return parse_feed_request(SETTINGS, f"forum.example.org/{path}", values)


def test_every_new_parameter_changes_the_cache_key_and_equal_forms_share_one():
    queries = ["", "min_replies=1", "min_likes=1", "min_views=1", "tag=a,b", "tag=a b", "exclude_tag=a",
               "exclude_category=3", "digest=daily", "digest=weekly", "digest=daily&limit=3"]
    keys = [spec(q).cache_key() for q in queries]
    assert len(set(keys)) == len(keys)
    assert spec("tag=a b").cache_key() == spec("tag=b%2Ba").cache_key()
    assert spec("tag=a,b").cache_key() == spec("tag=b&tag=a").cache_key()
    assert spec("exclude_tag=a,b").cache_key() == spec("exclude_tag=b&exclude_tag=a").cache_key()
    assert spec("min_likes=0").cache_key() == spec("").cache_key()
    assert spec("digest=daily&limit=7").cache_key() == spec("digest=daily").cache_key()
    assert spec("tag=b a", "tag/a+b.atom").cache_key() == spec("", "tag/a+b.atom").cache_key()


# --- digests -----------------------------------------------------------------------------------------------

def label(moment: datetime, digest: str) -> tuple[str, date]:
    day = moment.date()
    if digest == "daily":
        return day.isoformat(), day
    year, week, weekday = day.isocalendar()
    return f"{year}-W{week:02d}", day - timedelta(days=weekday - 1)


def activity(raw: Raw) -> datetime:
    """Where a digest places a JSON list's topic: where core orders it (`feeds/select/digest.py` `_placed`)."""
    return datetime.fromisoformat((raw.get("bumped_at") or raw["last_posted_at"]).replace("Z", "+00:00"))


def periods(topics: list[Raw], digest: str, more: bool, listed: list[Raw] | None = None,
            ) -> list[tuple[str, date, list[Raw]]]:
    """The periods a digest of `topics` (kept of `listed`) shows, newest first; `more`: the list goes on."""
    found: dict[tuple[str, date], list[Raw]] = {}
    for raw in topics:
        found.setdefault(label(activity(raw), digest), []).append(raw)
    if more:
        found.pop(label(min(map(activity, listed or topics)), digest), None)
    return [(name, start, found[(name, start)]) for name, start in sorted(found, key=lambda p: p[1], reverse=True)]


@pytest.mark.parametrize("digest", ["daily", "weekly"])
def test_digest_entries_ids_titles_dates_and_content(app, forum, digest):
    expected_periods = periods(raw_topics(), digest, more=True)[: {"daily": 7, "weekly": 8}[digest]]
    feed = get(app.feed_url(f"/latest.json?digest={digest}")).json()
    assert_json_feed_1_1(feed)
    base = f"{forum.url}/latest.md#digest={digest}/digest/"
    assert [i["id"] for i in feed["items"]] == [base + name for name, _, _ in expected_periods]
    for item, (name, start, topics) in zip(feed["items"], expected_periods):
        assert item["title"] == f"{name}: {len(topics)} topic{'' if len(topics) == 1 else 's'}"
        assert item["date_published"] == f"{start.isoformat()}T00:00:00Z"
        assert item["date_modified"] == max(map(activity, topics)).strftime("%Y-%m-%dT%H:%M:%SZ")
        order = sorted(topics, key=lambda t: (t["posts_count"], activity(t)), reverse=True)
        assert re.findall(r'/t/[^/"]+/(\d+)"', item["content_html"]) == [str(t["id"]) for t in order]
        assert f"{order[0]['posts_count'] - 1} repl" in item["content_html"]
        if forum.mode == "json":  # a Markdown list carries no likes, and this feed needs no JSON list
            assert f"{order[0]['like_count']} like" in item["content_html"]
        else:
            assert " like" not in item["content_html"]
    assert "daily digest" in feed["title"] or "weekly digest" in feed["title"]
    if digest == "weekly":
        assert all(re.fullmatch(r"\d{4}-W\d\d: \d+ topics?", i["title"]) for i in feed["items"])


def test_digest_combines_with_filters_pages_and_content(app, forum):
    listed = raw_topics() + raw_topics("latest/page-1.json")
    kept = [t for t in listed if t["like_count"] >= 5 and t["category_id"] != 6 and "cuda" not in tags(t)]
    want = periods(kept, "weekly", more=False)[:4]
    query = "digest=weekly&limit=4&min_likes=5&exclude_category=6&exclude_tag=cuda&pages=2&content=full"
    feed = get(app.feed_url(f"/latest.json?{query}")).json()
    assert [i["title"] for i in feed["items"]] == [f"{n}: {len(t)} topic{'' if len(t) == 1 else 's'}"
                                                    for n, _, t in want]
    assert "likes ≥ 5" in feed["title"] and "weekly digest" in feed["title"]
    by_jansel = get(app.feed_url("/latest.json?digest=daily&author=jansel&pages=2")).json()["items"]
    assert by_jansel and {a for i in by_jansel for a in re.findall(r"· by ([\w.-]+)", i["content_html"])} == {"jansel"}


def test_digest_ids_are_the_same_in_every_format_and_for_every_limit(app):
    json_ids = [i["id"] for i in get(app.feed_url("/latest.json?digest=daily")).json()["items"]]
    for fmt in ("atom", "rss"):
        feed = parsed(get(app.feed_url(f"/latest.{fmt}?digest=daily")).content)
        assert [e.id for e in feed.entries] == json_ids
        assert len({e.link for e in feed.entries}) == len(feed.entries)
    fewer = [i["id"] for i in get(app.feed_url("/latest.json?digest=daily&limit=3")).json()["items"]]
    assert fewer == json_ids[:3] and len(json_ids) == 7


def test_a_digests_own_id_is_its_digest_id_whatever_the_host_format_or_limit(forum):
    with running_app(settings_for(forum.url)) as one, running_app(settings_for(forum.url)) as two:
        atoms = [get(app.feed_url(f"/latest.atom?digest=weekly{extra}")).content
                 for app in (one, two) for extra in ("", "&limit=3")]
        json_items = get(two.feed_url("/latest.json?digest=weekly&limit=2")).json()["items"]
    digest_id = f"{forum.url}/latest.md#digest=weekly"
    for body in atoms:
        feed = parsed(body)
        assert feed.feed.id == digest_id and all(e.id.startswith(digest_id + "/digest/") for e in feed.entries)
    assert {next(link.href for link in parsed(body).feed.links if link.rel == "self") for body in atoms} == {
        app.feed_url(f"/latest.atom?digest=weekly{extra}") for app in (one, two) for extra in ("", "&limit=3")}
    assert all(i["id"].startswith(digest_id + "/digest/") for i in json_items)


def test_limit_counts_periods_and_a_list_cut_short_hides_its_oldest_period(app):
    every = periods(raw_topics(), "weekly", more=True)
    items = get(app.feed_url("/latest.json?digest=weekly&limit=50")).json()["items"]
    assert [i["title"].split(":")[0] for i in items] == [name for name, _, _ in every]
    oldest = label(min(map(activity, raw_topics())), "weekly")[0]
    assert oldest not in {i["title"].split(":")[0] for i in items}  # page 2 may hold more of that week
    two_pages = get(app.feed_url("/latest.json?digest=weekly&limit=50&pages=2")).json()["items"]
    assert oldest in {i["title"].split(":")[0] for i in two_pages}


def entries(body: bytes) -> dict[str, bytes]:
    """Each Atom entry's bytes by its id."""
    return {re.search(rb"<id>([^<]+)</id>", e)[1].decode(): e for e in re.findall(rb"<entry>.*?</entry>", body)}


def test_digest_is_byte_stable_across_rebuilds_instances_and_new_activity_elsewhere(forum):
    path = "/latest.atom?digest=daily&min_replies=1"
    with running_app(settings_for(forum.url)) as one, running_app(settings_for(forum.url, cache_ttl=0)) as two:
        first = get(one.feed_url(path)).content
        assert get(one.feed_url(path)).content == first
        before = entries(first)
        assert entries(get(two.feed_url(path)).content) == before  # another instance, another host name
        document = json.loads(get(f"{forum.url}/latest.json").content)
        newest = max(map(activity, document["topic_list"]["topics"]))
        moment = (newest + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")  # posted to and bumped, as core does
        fresh = dict(document["topic_list"]["topics"][1], id=4999, title="A new topic, the next day",
                     last_posted_at=moment, bumped_at=moment)
        document["topic_list"]["topics"].insert(0, fresh)
        forum.set_body("/latest.json", json.dumps(document))
        if forum.mode == "markdown":
            url = f"{forum.url}/t/a-new-topic/4999"
            block = (f"## [A new topic, the next day]({url})\n\n<div class=\"topic-metadata\">\n\n"
                     f"**Author:** [@smth]({forum.url}/u/smth)\\\n**Replies:** 3\\\n"
                     f"**Last updated:** [the next day]({url} \"{fresh['last_posted_at']}\")\n\n</div>\n\n"
                     "Something new.\n\n---\n\n")
            forum.set_body("/latest.md", (forum.root / "latest.md").read_text(encoding="utf-8").replace("## ", block + "## ", 1))
        after = entries(get(two.feed_url(path)).content)
    new = [key for key in after if key not in before]
    assert new == [next(iter(after))] and new[0].endswith((newest + timedelta(days=1)).date().isoformat())
    kept = [key for key in before if key in after]
    assert len(kept) == 6 and all(after[key] == before[key] for key in kept)


@pytest.mark.parametrize("fmt", ["atom", "rss"])
@pytest.mark.parametrize("query", ["digest=daily", "digest=weekly&tag=gpu+cuda", "min_likes=5&exclude_tag=gpu"])
def test_feeds_are_valid(app, fmt, query):
    feed = parsed(get(app.feed_url(f"/latest.{fmt}?{query}")).content)
    assert feed.entries and ("digest" in feed.feed.title) == ("/digest/" in feed.entries[0].id)
    assert "digest" in feed.feed.title or "likes ≥ 5" in feed.feed.title


def test_html_view_of_a_digest_reads_as_a_digest(app):
    page = get(app.feed_url("/latest.html?digest=weekly&limit=2"))
    assert page.status_code == 200
    assert "weekly digest" in page.text and re.search(r"\d{4}-W\d\d: \d+ topics", page.text)
    assert "<ul><li><a href=" in page.text and "by a deleted user · ? replies" not in page.text


# --- feedbridge build of a saved list -----------------------------------------------------------------------

SAVED_QUERIES = [  # (the feed URL's query, the same feed's build options)
    ("min_likes=12", ["--min-likes", "12"]),
    ("min_replies=5&min_views=300&exclude_tag=cuda", ["--min-replies", "5", "--min-views", "300",
                                                       "--exclude-tag", "cuda"]),
    ("tag=gpu&tag=rfc", ["--tag", "gpu", "--tag", "rfc"]),
    ("tag=cuda%2Bgpu&exclude_tag=rfc", ["--tag", "cuda+gpu", "--exclude-tag", "rfc"]),
    ("digest=weekly&min_likes=3", ["--digest", "weekly", "--min-likes", "3"]),
    ("digest=daily&limit=3&exclude_tag=cuda", ["--digest", "daily", "--limit", "3", "--exclude-tag", "cuda"]),
]


@pytest.mark.parametrize(("query", "options"), SAVED_QUERIES, ids=[q for q, _ in SAVED_QUERIES])
def test_build_of_a_saved_json_list_is_the_feed_the_service_serves(upstream_json, tmp_path, query, options):
    saved = tmp_path / "latest.json"
    saved.write_bytes(get(f"{upstream_json.url}/latest.json").content)  # likes, views and tags as served
    with running_app(settings_for(upstream_json.url)) as app:
        served_body = get(app.feed_url(f"/latest.atom?{query}")).content
    served = parsed(served_body)
    self_url = next(link.href for link in served.feed.links if link.rel == "self")
    result = run("build", str(saved), "--base-url", upstream_json.url, "--self-url", self_url, *options)
    assert result.returncode == 0, result.stderr
    built = parsed(result.stdout)
    assert served.entries and (built.feed.id, built.feed.title) == (served.feed.id, served.feed.title)
    assert [(e.id, e.title, e.updated) for e in built.entries] == [(e.id, e.title, e.updated) for e in served.entries]
    if "digest" in query:  # a digest's entries are functions of their topics alone: the same bytes
        assert entries(result.stdout) == entries(served_body)


@pytest.mark.parametrize(("options", "name"), [
    (["--min-likes", "1"], "min_likes"), (["--min-views", "1"], "min_views"), (["--exclude-tag", "rfc"], "exclude_tag"),
    (["--tag", "gpu"], "tag"), (["--tag", "gpu+cuda"], "tag"), (["--digest", "daily", "--min-likes", "1"], "min_likes"),
    (["--exclude-category", "6"], "exclude_category"),
])
def test_build_of_a_saved_markdown_list_refuses_what_it_does_not_carry(options, name):
    result = run("build", str(SEED), *options)
    assert result.returncode == 2 and not result.stdout
    assert name in result.stderr.decode() and "saved" in result.stderr.decode()


def test_build_of_a_saved_json_list_refuses_exclude_category(upstream_json, tmp_path):
    saved = tmp_path / "latest.json"
    saved.write_bytes(get(f"{upstream_json.url}/latest.json").content)
    result = run("build", str(saved), "--base-url", upstream_json.url, "--exclude-category", "11")
    assert result.returncode == 2 and not result.stdout and b"exclude_category" in result.stderr


def test_build_of_a_saved_markdown_list_makes_digests_and_reply_thresholds():
    result = run("build", str(SEED), "--format", "json", "--digest", "weekly", "--min-replies", "2")
    assert result.returncode == 0, result.stderr
    feed = json.loads(result.stdout)
    assert feed["items"] and all("/digest/" in i["id"] and re.fullmatch(r"\d{4}-W\d\d: \d+ topics?", i["title"])
                                 for i in feed["items"])
    assert "replies ≥ 2" in feed["title"] and "weekly digest" in feed["title"]
    assert all(int(n) >= 2 for i in feed["items"] for n in re.findall(r"· (\d+) repl", i["content_html"]))


# --- static builds --------------------------------------------------------------------------------------

def test_static_build_config_accepts_every_new_parameter(tmp_path):
    config = tmp_path / "feeds.toml"
    config.write_text('site_url = "https://feeds.example.org/"\n[[feeds]]\nname = "latest"\npath = "latest"\nmin_replies = 2\nmin_likes = 3\nmin_views = 4\n'
                      'tag = "gpu+cuda"\nexclude_tag = ["rfc", "meta"]\nexclude_category = [6, 7]\ndigest = "weekly"\n'
                      '[[feeds]]\nname = "both"\npath = "tag/gpu+cuda"\n')
    plan, intersection = load_build_config(config).feeds
    chosen = plan.specs[0]
    assert (chosen.filter.min_replies, chosen.filter.min_likes, chosen.filter.min_views) == (2, 3, 4)
    assert chosen.filter.tags_all == {"gpu", "cuda"} and chosen.filter.exclude_tags == {"rfc", "meta"}
    assert chosen.filter.exclude_categories == {6, 7} and chosen.digest == "weekly" and chosen.digest_limit == 8
    assert intersection.specs[0].intersection == ("gpu", "cuda")
    config.write_text('site_url = "https://feeds.example.org/"\n[[feeds]]\nname = "latest"\npath = "latest"\nmin_likes = -1\n')
    with pytest.raises(BuildConfigError, match="min_likes"):
        load_build_config(config)


# --- the front page's builder ---------------------------------------------------------------------------

def test_builder_offers_every_parameter_and_its_feed_url_carries_them(app, forum):
    from lxml import html as lxml_html

    chosen = {"forum": app.forum_key, "list": "latest", "tags": "gpu, cuda", "tag_match": "all",
              "exclude_tag": "rfc", "min_replies": "2", "min_likes": "3", "min_views": "4", "digest": "weekly",
              "format": "rss"}
    page = lxml_html.fromstring(get(f"{app.url}/?{httpx.QueryParams(chosen)}").content)
    for name in ("tags", "exclude_tag", "min_replies", "min_likes", "min_views"):
        assert page.xpath(f"//form[@id='feed-form']//input[@name='{name}']/@value") == [chosen[name]]
    assert page.xpath("//form[@id='feed-form']//input[@name='min_likes']/@type") == ["number"]
    assert page.xpath("//select[@name='digest']/option[@selected]/@value") == ["weekly"]
    assert page.xpath("//input[@name='tag_match'][@checked]/@value") == ["all"]
    feed_url = page.xpath("//input[@id='feed-url']/@value")[0]
    query = httpx.URL(feed_url).params
    assert (query["tag"], query["exclude_tag"], query["digest"]) == ("cuda+gpu", "rfc", "weekly")
    assert (query["min_replies"], query["min_likes"], query["min_views"]) == ("2", "3", "4")
    feed = parsed(get(feed_url).content)  # the URL the builder gives is a feed, and the preview shows it
    assert [e.title for e in feed.entries] == page.xpath("//section[@id='result']//h3[@class='entry-title']/a/text()")
    assert page.xpath("//div[@class='entry-digest']")
    edit = lxml_html.fromstring(get(feed_url.replace(".rss", ".html")).content)
    back = dict(httpx.URL(edit.xpath("//a[starts-with(text(), 'Change this feed')]/@href")[0]).params)
    assert (back["tags"], back["tag_match"], back["min_likes"], back["digest"]) == ("cuda+gpu", "all", "3", "weekly")


def test_builder_recognises_a_tag_intersection_url(app, forum):
    from lxml import html as lxml_html

    pasted = f"{forum.url}/tags/intersection/gpu/cuda"
    page = lxml_html.fromstring(get(f"{app.url}/?{httpx.QueryParams({'url': pasted})}").content)
    assert page.xpath("//input[@id='feed-url']/@value")[0].endswith("/tag/gpu+cuda.atom")
