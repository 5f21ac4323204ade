"""The table of feed parameters (`feedbridge/feeds/request/params.py`, issue 44 item 2) and every way in that reads it:
feed URLs (over a real socket), `feedbridge build`'s options, a static config's keys and the front page's form.

Before the table a parameter was written out in seven places, and a misspelt or misplaced one was silently
ignored: `/c/compiler/5.atom?min_post=5` and `?category=9` answered 200 with the unfiltered feed's bytes,
and the CLI had no `--content`, `--pages`, `--category` or `--period`.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from lxml import html as lxml_html

from feedbridge.config import Settings, parse_forum
from feedbridge.errors import RequestError
from feedbridge.feeds.request import params
from feedbridge.feeds.request.params import FEEDS, FeedKind, Param
from feedbridge.feeds.request.spec import FeedSpec, parse_feed_request
from feedbridge.staticsite.plan import PARAMS as STATIC_KEYS
from feedbridge.web.feedform import FIELDS, LIST_FEEDS, FeedForm
from tests.appserver import running_app, settings_for
from tests.test_cli import SEED, run
from tests.test_static import run as run_static
from tests.test_static import write_config

HOST = "forum.example.org"
SETTINGS = Settings(forums=(parse_forum(f"https://{HOST}"),))
# A feed path of each kind of feed the table knows.
PATHS: dict[FeedKind, str] = {
    "latest": "latest", "top": "top", "hot": "hot", "category": "c/compiler/5", "category_top": "c/compiler/5/l/top",
    "tag": "tag/gpu", "user_topics": "u/alice", "filter": "filter", "topic_posts": "t/some-topic/35",
    "posts": "posts", "user_posts": "u/alice/posts",
}
REQUIRED = {"filter": {"q": ["status:open"]}}


def sample(param: Param) -> str:
    """A value of `param` that its row accepts."""
    if param.value == "choice":
        return param.choices[-1][0]
    if param.value == "text":
        return "status:closed" if param.feeds == {"filter"} else "gpu"
    return {"whole": str(max(param.low, 1)), "ids": "3", "flag": "1", "names": "alice", "tags": "gpu",
            "duration": "36h", "signature": "0" * 64}[param.value]


def spec(feed: FeedKind, args: dict[str, list[str]]) -> FeedSpec:
    return parse_feed_request(SETTINGS, f"{HOST}/{PATHS[feed]}.atom", {**REQUIRED.get(feed, {}), **args})


# --- feed URLs -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("feed", list(FEEDS))
def test_each_feed_takes_exactly_the_parameters_its_rows_give_it(feed: FeedKind) -> None:
    """Every parameter of the table on every kind of feed: taken where a row says so (the token too, which
    the signature check reads), else a 400 that names it and says what this feed takes."""
    for name in params.NAMES:
        row = params.row(name, feed)
        args = {name: [sample(row or params.NAMED[name])]}
        if (feed, name) == ("topic_posts", "pages"):  # for a filter to match (tests/test_routes_core.py)
            args["q"] = ["x"]
        if row is not None:
            spec(feed, args)
            continue
        with pytest.raises(RequestError) as refused:
            spec(feed, args)
        assert refused.value.param == name and refused.value.message.startswith(f"{name}=")


def test_a_parameter_no_row_names_is_refused_with_the_nearest_one() -> None:
    with pytest.raises(RequestError) as refused:
        spec("category", {"min_view": ["5"]})
    assert refused.value.param == "min_view"
    assert refused.value.message.startswith("min_view= is not a feed parameter (did you mean min_views=?)")
    assert "/c/… feeds take author, q, tag" in refused.value.message
    with pytest.raises(RequestError, match=r"the parameter 'x\\x01' is not a feed parameter"):
        spec("latest", {"x\x01": ["1"]})


def test_what_the_filter_holds_is_read_and_named_from_the_rows() -> None:
    """The rows with a `filter_field` reach the filter and the canonical query by that field alone."""
    given = {p.name: [sample(p)] for p in params.rows("latest") if p.filter_field}
    made = spec("latest", given)
    assert {p.filter_field for p in params.rows("latest") if p.filter_field} <= {
        name for name in made.filter.__slots__ if getattr(made.filter, name) not in (None, False, frozenset())}
    assert {k for k, _ in made.canonical_query()} == set(given)


def test_misspelt_and_misplaced_parameters_are_400_naming_them_over_a_socket(upstream) -> None:
    """The issue's two URLs, and one of each other kind of mistake, against the running app: 400 with the
    parameter's name, where they were 200 with the unfiltered feed's bytes; nothing is fetched for them, and
    the feed itself still answers."""
    with running_app(settings_for(upstream.url)) as app:
        plain = httpx.get(app.feed_url("/c/compiler/5.atom"), timeout=30)
        assert plain.status_code == 200
        fetched = upstream.count()
        for path, name in [("/c/compiler/5.atom?min_post=5", "min_post"), ("/c/compiler/5.atom?category=9", "category"),
                           ("/c/compiler/5.html?min_post=5", "min_post"), ("/latest.rss?period=weekly", "period"),
                           ("/posts.json?tag=gpu", "tag"), ("/u/alice.atom?author=bob", "author"),
                           ("/latest.atom?keyword=gpu", "keyword"), ("/latest.atom?limit=5&limit=6", "limit")]:
            response = httpx.get(app.feed_url(path), timeout=30)
            assert response.status_code == 400, path
            assert name in response.text and response.content != plain.content, path
        assert upstream.count() == fetched  # refused before anything is read
        assert httpx.get(app.feed_url("/c/compiler/5.atom"), timeout=30).content == plain.content


# --- the command line -------------------------------------------------------------------------------------

def test_the_cli_offers_every_parameter_the_web_takes() -> None:
    """Every row has an option, but the token (a signed URL's) and a /filter feed's own `q=` (the forum's
    filter query, which `build` reads from its SOURCE URL); and `build --help` lists each."""
    missing = {(p.name, frozenset(p.feeds)) for p in params.PARAMETERS if not p.cli}
    assert missing == {("token", params.EVERY), ("q", frozenset({"filter"}))}
    shown = run("build", "--help").stdout.decode()
    assert all(f"--{p.option_name}" in shown for p in params.PARAMETERS if p.cli)
    assert {"--content", "--pages", "--category", "--period"} <= {f"--{p.option_name}" for p in params.PARAMETERS}


@pytest.mark.parametrize(("args", "named"), [
    (("--min-post", "5"), "--min-post"),  # click names the option and its neighbours
    (("--pages", "99"), "pages must be a whole number from 1 to"),
    (("--period", "hourly"), "--period"),
    (("--exclude-category", "x"), "--exclude-category"),
])
def test_the_cli_refuses_an_unknown_or_invalid_option_by_name(upstream, args: tuple[str, ...], named: str) -> None:
    result = run("build", f"{upstream.url}/top.md", *args)
    assert result.returncode == 2 and named in result.stderr.decode(), result.stderr
    assert result.stdout == b"" and upstream.count() == 0


def test_the_cli_refuses_an_option_the_feed_does_not_take(upstream) -> None:
    """As a URL does: `--category` on a category's feed, `--period` on /latest."""
    for source, args, named in [("/c/compiler/5.md", ("--category", "9"), "category= is for /latest"),
                                ("/latest.md", ("--period", "weekly"), "period= is for /top")]:
        result = run("build", upstream.url + source, *args)
        assert result.returncode == 2 and named in result.stderr.decode(), result.stderr
    assert upstream.count() == 0


@pytest.mark.parametrize(("source", "option", "value", "asked"), [
    ("/top.md", "--period", "weekly", "/top.md?period=weekly"),
    ("/latest.md", "--category", "5", "/latest.md?category=5"),
    ("/latest.md", "--pages", "2", "/latest.md?page=1"),
    ("/c/compiler/5.md", "--content", "full", "/t/"),
])
def test_each_new_cli_option_builds_the_feed_the_server_serves(upstream, source: str, option: str, value: str,
                                                             asked: str) -> None:
    """The CLI's new options read what the feed URL's parameters read, and give its entries."""
    result = run("build", upstream.url + source, "--format", "json", option, value)
    assert result.returncode == 0, result.stderr
    assert any(r.target.startswith(asked) for r in upstream.requests), [r.target for r in upstream.requests]
    built = json.loads(result.stdout)["items"]
    name = option.removeprefix("--")
    with running_app(settings_for(upstream.url)) as app:
        served = httpx.get(app.feed_url(source.removesuffix(".md") + ".json"), params={name: value}, timeout=30)
    assert served.status_code == 200, served.text
    assert [i["id"] for i in built] == [i["id"] for i in served.json()["items"]]
    if option == "--content":
        assert any(i.get("content_html") for i in built)


@pytest.mark.parametrize(("option", "value"), [("--pages", "2"), ("--content", "full"), ("--period", "weekly"),
                                               ("--category", "5")])
def test_a_saved_list_refuses_what_it_does_not_carry_by_name(option: str, value: str) -> None:
    """A saved list is one page of excerpts, the list its own URL names: exit 2 naming the option, never a
    feed that quietly lacks what was asked."""
    result = run("build", str(SEED), option, value)
    assert result.returncode == 2 and option in result.stderr.decode(), result.stderr
    assert result.stdout == b""


# --- a static config ----------------------------------------------------------------------------------------

def test_a_static_configs_keys_are_the_tables() -> None:
    assert set(STATIC_KEYS) == {p.name for p in params.PARAMETERS if p.static} == set(params.NAMES) - {"token"}


@pytest.mark.parametrize(("key", "words"), [
    ("min_post = 5", "unknown key 'min_post' in [feeds]"),
    ("token = \"x\"", "unknown key 'token' in [feeds]"),
    ("period = \"weekly\"", "period= is for /top and /c/…/l/top feeds"),
    ("category = 9", "category= is for /latest"),
])
def test_a_static_config_refuses_a_key_by_name_and_line(tmp_path, upstream, key: str, words: str) -> None:
    config = write_config(tmp_path, upstream.url, f'[[feeds]]\nname = "c"\npath = "c/compiler/5"\n{key}\n')
    code, out, err = run_static(config)
    line = config.read_text().splitlines().index(key) + 1
    assert code == 2 and err.startswith(f"{config}:{line}: ") and words in err, err
    assert out == "" and upstream.count() == 0


# --- the front page's form ----------------------------------------------------------------------------------

def test_the_form_has_a_field_for_each_row_with_a_label_shown_for_the_lists_that_take_it(upstream) -> None:
    with running_app(settings_for(upstream.url)) as app:
        page = lxml_html.fromstring(httpx.get(f"{app.url}/", timeout=30).content)
    form = page.get_element_by_id("feed-form")
    for param in FIELDS:
        control = form.get_element_by_id(param.form_name)
        assert control.get("name") == param.form_name
        assert param.label in form.xpath(f"string(.//label[@for='{param.form_name}'])")
        box = control.xpath("ancestor::*[contains(@class, 'field')][1]")[0]
        takes = [name for name, feeds in LIST_FEEDS.items()
                 if any(set(feeds) & p.feeds for p in params.PARAMETERS if p.label and p.form_name == param.form_name)]
        shown = box.get("data-for-list")
        assert (shown or " ".join(LIST_FEEDS)).split() == takes if param.group == "" else set(takes) <= set(
            shown.split() if shown else LIST_FEEDS), param.name
    assert {p.name for p in params.PARAMETERS if not p.label} == {"token"}


@pytest.mark.parametrize("chosen", list(LIST_FEEDS))
def test_the_form_never_sends_a_parameter_its_list_refuses(chosen: str) -> None:
    """Every field filled in, on every list: the feed request carries what the list's feed takes and parses."""
    filled = {p.form_name: sample(p) for p in FIELDS if p.value != "choice" or p.default == ""}
    structure = {"forum": HOST, "category": "compiler/5", "tag": "gpu", "topic": "35", "user": "alice"}
    for view in ("", "top") if chosen == "category" else ("",):
        form = FeedForm(list=chosen, view=view, **structure, **{**filled, "q": "gpu", "filter_query": "status:open"})
        path, args = form.feed_request()
        made = parse_feed_request(SETTINGS, path, args)
        assert {name for name in args} == {p.name for p in params.rows(made.feed) if p.label and (
            p.form_name in filled or p.form_name in ("q", "filter_query"))}


def test_the_preview_builds_the_url_of_a_new_cli_parameter(upstream) -> None:
    """A parameter the CLI lacked (`pages=`) reaches the feed URL the front page gives."""
    with running_app(settings_for(upstream.url)) as app:
        shown = httpx.get(f"{app.url}/preview", params={"forum": app.forum_key, "list": "latest", "pages": "2"},
                          timeout=30).text
    url = lxml_html.fromstring(shown).xpath("//input[@id='feed-url']/@value")[0]
    assert parse_qs(urlsplit(url).query) == {"pages": ["2"]}
