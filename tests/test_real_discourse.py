"""Real Discourse, second round (issue 45): what a reader of a real forum meets where core's source differs
from what the fakes did, each against the fake forum answering as core does, over a real socket.

- A category's own path is its default view (app/controllers/list_controller.rb `category_default`): a
  category set to "Top", or sorted by likes (lib/topic_query.rb `default_results`), lists old topics there;
  the bridge reads its latest list by activity where core serves it (`feedbridge.feeds.sources.dialects`).
- A forum whose crawler policy refuses the bridge answers `403 Crawler is not allowed!`
  (lib/middleware/anonymous_cache.rb): said as the crawler policy, not as members only.
- A login-required forum with single sign-on sends a page request to `/session/sso` or `/auth/PROVIDER`
  (app/controllers/application_controller.rb `redirect_to_login`): members only, not a 502.
- Subcategories are in the directory only when asked `include_subcategories=true`
  (app/models/category_list.rb `find_categories`), and over 1,000 categories it comes in pages.
- A `/filter` term core's TopicsFilter would ignore (lib/topics_filter.rb) is refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import feedparser
import httpx
import pytest
from lxml import html as lxml_html

from feedbridge import USER_AGENT
from feedbridge.config import Settings
from feedbridge.feeds.request.signing import sign_url
from feedbridge.feeds.sources.site import MAX_PAGES
from tests.appserver import RunningApp, running_app, settings_for
from tests.fake_private import USER_API_KEY
from tests.upstream import JSON_ROOT, MODES, PROJECT_ROOT, SSO_PROVIDER, Crawlers, FakeForum, read_at

COMPILER = "/c/compiler/5"
EXPECTED = json.loads((PROJECT_ROOT / "fixtures" / "site-expected.json").read_text(encoding="utf-8"))
SECRET = "a-secret-of-more-than-16-chars"


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, timeout=30, **kwargs)


def item_ids(response: httpx.Response) -> list[int]:
    assert response.status_code == 200, response.text
    return [int(item["id"].rsplit("/", 1)[1]) for item in response.json()["items"]]


def line(response: httpx.Response) -> str:
    """The one line of a plain error."""
    assert response.text.count("\n") == 1, response.text
    return response.text.strip()


def keyed(forum: FakeForum, **extra: str) -> Settings:
    """The bridge with a key for the forum (so its messages may point at a signed URL)."""
    key = forum.url.removeprefix("http://")
    return Settings.from_env({"FEEDBRIDGE_FORUMS": forum.url, "FEEDBRIDGE_SECRET": SECRET,
                              "FEEDBRIDGE_CREDENTIALS": f"{key}=user-api-key:{USER_API_KEY}", **extra})


# --- 1. a category's own default view ---------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_category_whose_default_view_is_top_still_gives_its_new_topics(mode: str) -> None:
    """Its own path answers its top list of old popular topics; the feed holds its latest list all the same,
    read where core serves it whatever the default view, and never from the category's own path."""
    with FakeForum(mode=mode, default_views={5: "top"}) as forum, running_app(settings_for(forum.url)) as app:
        suffix = ".md" if mode == "markdown" else ".json"
        found = item_ids(get(app.feed_url(f"{COMPILER}.json")))
        targets = [r.target for r in forum.requests]
        own = get(f"{forum.url}/c/compiler/5{suffix}")  # what a reader of the category's own path gets
        top = get(f"{forum.url}" + ("/top.md?category=5" if mode == "markdown" else "/c/compiler/5/l/top.json"))
    assert own.status_code == 200 and own.content == top.content
    older = {t["id"] for t in EXPECTED["c/compiler/5/page-1.md"]["topics"]}  # the next page, for contrast
    top_ids = {t["id"] for t in EXPECTED["c/compiler/5/l/top.md"]["topics"]}
    assert 3441 in found and not set(found) & older  # the newest topic of the category, none of page 1's
    assert set(found) != top_ids
    assert read_at(COMPILER, mode) in targets and f"/c/compiler/5{suffix}" not in targets


def test_a_category_sorted_by_likes_still_gives_its_newest_topics() -> None:
    """TopicQuery#default_results: without `order`, a category's `sort_order` orders its pages, so page 0 of
    its own path holds its most liked topics, from every page; `order=activity` gives the newest."""
    with FakeForum(mode="json", default_views={5: "likes"}) as forum, running_app(settings_for(forum.url)) as app:
        liked = {t["id"] for t in get(f"{forum.url}/c/compiler/5.json").json()["topic_list"]["topics"]}
        found = set(item_ids(get(app.feed_url(f"{COMPILER}.json"))))
    newest = {t["id"] for t in json.loads((JSON_ROOT / "c/compiler/5.json").read_text())["topic_list"]["topics"]}
    assert found == newest and liked != newest


# --- 3. a crawler policy -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_a_crawler_policy_that_refuses_the_bridge_is_said_so_with_who_can_lift_it(mode: str) -> None:
    """`allowed_crawler_user_agents` set without feedbridge: every anonymous request is `403 Crawler is not
    allowed!`. Readers are told so (403, the forum's admins can allow `feedbridge`; a signed URL passes, as a
    key passes core's check), never "members only"; the answer is remembered like any failure."""
    with FakeForum(mode=mode, crawlers=Crawlers(allowed="Googlebot|Bingbot")) as forum, \
            running_app(keyed(forum)) as app:
        first = get(app.feed_url(f"{COMPILER}.atom"))
        asked = [r.target for r in forum.requests]
        again = get(app.feed_url(f"{COMPILER}.rss"))
        asked_again = forum.count()
        settings = keyed(forum)
        signed = get(app.url + sign_url(settings, f"/{app.forum_key}{COMPILER}.atom"))
    assert first.status_code == again.status_code == 403
    said = line(first)
    assert "crawler policy refuses the bridge" in said and "Crawler is not allowed!" in said
    assert "allowed_crawler_user_agents" in said and "signed feed URL" in said
    assert "members" not in said and "login" not in said
    # the feed's own list (which decides nothing) and the probe, whose answer is remembered: no third request
    assert asked == [read_at(COMPILER), "/latest.md"] and asked_again == 2 and "crawler policy" in line(again)
    assert signed.status_code == 200 and feedparser.parse(signed.content).entries  # a key passes


def test_a_forum_that_allows_feedbridge_is_read_and_the_user_agent_says_who_runs_the_bridge() -> None:
    with FakeForum(crawlers=Crawlers(allowed="Googlebot|feedbridge")) as forum, \
            running_app(settings_for(forum.url, contact_url="https://bridge.example/about")) as app:
        assert get(app.feed_url(f"{COMPILER}.atom")).status_code == 200
        agents = {r.headers["user-agent"] for r in forum.requests}
    assert agents == {f"{USER_AGENT} (+https://bridge.example/about)"}


def test_a_crawler_policy_on_the_front_page_names_it() -> None:
    with FakeForum(crawlers=Crawlers(blocked="feedbridge")) as forum, running_app(settings_for(forum.url)) as app:
        page = get(f"{app.url}/", params={"forum": app.forum_key, "list": "latest"})
        preview = get(f"{app.url}/preview", params={"forum": app.forum_key, "list": "latest"})
    assert page.status_code == 200
    shown = " ".join(lxml_html.fromstring(preview.content).text_content().split())
    assert "crawler policy" in shown and "allowed_crawler_user_agents" in shown


# --- 4. a login-required forum with single sign-on ---------------------------------------------------------

@pytest.mark.parametrize("kind", ["sso", "oauth", "login"])
def test_a_login_required_forum_is_members_only_whatever_signs_people_in(kind: str) -> None:
    """A page request goes to `/session/sso` (and on to the provider, another host), to `/auth/oidc` or to
    `/login`; a JSON one gets 403 not_logged_in. Either way the reader is told members only, with the signed
    URL that reads it: 403, never a 502 "redirected outside", and the same from the remembered failure."""
    with FakeForum(login_required=kind) as forum, running_app(keyed(forum)) as app:
        first = get(app.feed_url(f"{COMPILER}.atom"))
        asked = [r.target for r in forum.requests]
        again = get(app.feed_url(f"{COMPILER}.json"))
        remembered = forum.count() == len(asked)
        settings = keyed(forum)
        signed = get(app.url + sign_url(settings, f"/{app.forum_key}{COMPILER}.atom"))
        sso = [r for r in forum.requests if r.path in ("/session/sso", "/login") or r.path.startswith("/auth/")]
    for answer in (first, again):
        assert answer.status_code == 403, answer.text
        said = line(answer)
        assert "shown only to signed-in members" in said and "a signed feed URL reads it" in said
        assert "outside" not in said and SSO_PROVIDER not in said
    # The feed's own Markdown list (which decides nothing) and the probe were sent to sign in (so the lists are
    # read as JSON: 403 not_logged_in), and nothing more is asked while the failure is remembered; the sign-in is
    # never followed.
    assert asked == [read_at(COMPILER), "/latest.md", read_at(COMPILER, "json")] and remembered
    assert sso == []
    assert signed.status_code == 200


def test_a_markdown_forum_sent_to_sign_in_is_members_only_and_remembered_so() -> None:
    """The source fixed to Markdown (no detection): the list's own answer is the redirect to `/session/sso`,
    remembered as what it means, so the next reader is told the same without a request."""
    with FakeForum(login_required="sso") as forum, running_app(settings_for(f"markdown:{forum.url}")) as app:
        answers = [get(app.feed_url(f"{COMPILER}.{fmt}")) for fmt in ("atom", "rss", "json")]
        targets = [r.target for r in forum.requests]
    assert {a.status_code for a in answers} == {403}
    assert all("shown only to signed-in members" in line(a) and "this bridge has no key" in line(a) for a in answers)
    assert "to sign in at /session/sso" in line(answers[0]) and "remembered" in line(answers[-1])
    assert targets == [read_at(COMPILER)]


def test_a_markdown_forum_in_json_asks_its_lists_and_reads_members_only_from_not_logged_in() -> None:
    with FakeForum(login_required="sso", mode="json") as forum, \
            running_app(settings_for(f"json:{forum.url}")) as app:
        response = get(app.feed_url("/latest.atom"))
    assert response.status_code == 403 and "shown only to signed-in members" in line(response)
    assert "this bridge has no key" in line(response)


# --- 5. subcategories ---------------------------------------------------------------------------------------

def test_a_json_lists_subcategory_topics_are_named_from_the_directory_with_every_level() -> None:
    """A JSON list names a topic's category by id; the names come from the directory, which has the third
    level only when asked `include_subcategories=true`."""
    with FakeForum(mode="json") as forum, running_app(settings_for(forum.url)) as app:
        document = json.loads((JSON_ROOT / "latest.json").read_text(encoding="utf-8"))
        moved = next(t for t in document["topic_list"]["topics"] if t["category_id"] == 12)
        moved["category_id"] = 13
        forum.set_body("/latest.json", json.dumps(document))
        items = {int(i["id"].rsplit("/", 1)[1]): i for i in get(app.feed_url("/latest.json")).json()["items"]}
        asked = [r.target for r in forum.requests if r.path == "/categories.json"]
    assert "graphs" in items[moved["id"]]["tags"]
    assert asked == ["/categories.json?include_subcategories=true"]


def paged_directory(count: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """A forum of over 1,000 categories, as core pages it (CategoryList#paginate_results?): 20 top-level
    categories a page, each with up to five children beside it, flat, no `subcategory_list`."""
    for page in range(1, count + 1):
        categories: list[dict[str, Any]] = []
        for n in range(20):
            top = 1000 + page * 100 + n
            categories.append({"id": top, "name": f"top {top}", "slug": f"top-{top}", "subcategory_ids": [top + 50]})
            categories.append({"id": top + 50, "name": f"child {top}", "slug": f"child-{top}",
                               "parent_category_id": top, "subcategory_ids": []})
        yield ("/categories.json" if page == 1 else f"/categories.json?page={page}"), \
            {"category_list": {"categories": categories}}


@pytest.mark.parametrize("pages", [3, MAX_PAGES + 3])
def test_a_paged_directory_is_read_page_by_page_within_a_bound(pages: int) -> None:
    with FakeForum(mode="json") as forum, running_app(settings_for(forum.url)) as app:
        for path, document in paged_directory(pages):
            forum.set_body(path, json.dumps(document))
        forum.set_body(f"/categories.json?page={pages + 1}", '{"category_list": {"categories": []}}')
        front = lxml_html.fromstring(get(f"{app.url}/?forum={app.forum_key}").content)
        offered = set(front.xpath("//select[@id='category']/option/@value"))
        asked = [r.target for r in forum.requests if r.path == "/categories.json"]
    read = min(pages, MAX_PAGES)
    assert asked == ["/categories.json?include_subcategories=true"] + [
        f"/categories.json?include_subcategories=true&page={n}" for n in range(2, read + 1 + (pages < MAX_PAGES))]
    last = 1000 + read * 100 + 19
    assert f"top-{last}/{last}" in offered and f"top-{last}/child-{last}/{last + 50}" in offered
    assert not any(value.endswith(f"/{1000 + (read + 1) * 100}") for value in offered)


def test_a_paged_markdown_directory_follows_its_next_page_link() -> None:
    with FakeForum() as forum, running_app(settings_for(forum.url)) as app:
        forum.set_body("/categories.md", "# Categories\n\n## [one](https://forum.example.org/c/one/21.md)\n\nFirst.\n\n"
                       "[Next page](https://forum.example.org/categories.md?include_subcategories=true&page=2)\n")
        forum.set_body("/categories.md?page=2", "# Categories\n\n## [two](https://forum.example.org/c/two/22.md)\n\n"
                       "Second.\n\n[Previous page](https://forum.example.org/categories.md?include_subcategories=true)\n")
        front = lxml_html.fromstring(get(f"{app.url}/?forum={app.forum_key}").content)
        asked = [r.target for r in forum.requests if r.path == "/categories.md"]
    assert {"one/21", "two/22"} <= set(front.xpath("//select[@id='category']/option/@value"))
    assert asked == ["/categories.md?include_subcategories=true", "/categories.md?include_subcategories=true&page=2"]


# --- 6. /filter terms core ignores ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def filtering() -> Iterator[tuple[FakeForum, RunningApp]]:
    with FakeForum(mode="json") as forum:
        key = forum.url.removeprefix("http://")
        settings = Settings.from_env({"FEEDBRIDGE_FORUMS": forum.url,
                                      "FEEDBRIDGE_FILTER_TERMS": f"{key}=status:solved,assigned"})
        with running_app(settings) as app:
            yield forum, app


@pytest.mark.parametrize(("query", "named"), [
    ("staus:closed", "staus:closed (core has no filter staus:)"),
    ("status:closd", "status:closd (core's status: is one of"),
    ("likes-min:five tag:gpu", "likes-min:five (likes-min: takes a whole number)"),
    ("order:newest", "order:newest (core's order: is one of activity"),
    ("=tag:gpu", "=tag:gpu (core reads tag: with no prefix but -"),
])
def test_a_filter_term_core_would_ignore_is_refused_by_name_before_any_request(filtering, query, named):
    """lib/topics_filter.rb ignores a key it does not know and records an unknown value as invalid: the
    forum's answer would be the whole list (`staus:closed`: every topic, where `status:closed` gives none)."""
    forum, app = filtering
    forum.reset()
    whole = get(f"{forum.url}/filter.json", params={"q": query}).json()["topic_list"]["topics"]
    response = get(app.feed_url("/filter.atom"), params={"q": query})
    assert response.status_code == 400 and named in line(response) and "FEEDBRIDGE_FILTER_TERMS" in line(response)
    assert [r.path for r in forum.requests] == ["/filter.json"] and len(whole) > 0  # only the test's own look


@pytest.mark.parametrize("query", ["status:closed", "status:solved", "assigned:alice", "in:pinned order:likes-asc",
                                   "created-after:2026-01-31 posters-min:2", "tags:gpu -=category:general"])
def test_cores_terms_and_the_plugins_the_operator_lists_are_sent(filtering, query):
    forum, app = filtering
    response = get(app.feed_url("/filter.atom"), params={"q": query})
    assert response.status_code == 200, response.text
    assert any(r.path == "/filter.json" for r in forum.requests)
