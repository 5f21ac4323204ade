"""The fake forum does what later tests rely on, observed over a real socket with httpx."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime

import httpx
import pytest

from feedbridge.discourse.listing import parse_listing
from feedbridge.models import listing_to_dict
from tests.fake_posts import MODERATOR_ACTION, PostSite
from tests.upstream import PROJECT_ROOT, SSO_PROVIDER, Crawlers, FakeForum, Fault, spawn

SITE = PROJECT_ROOT / "fixtures" / "site"


@pytest.fixture
def client(upstream: FakeForum) -> httpx.Client:
    with httpx.Client(base_url=upstream.url, timeout=5) as client:
        yield client


# files, paging, rewriting

def test_serves_markdown_with_core_headers_and_no_validators(client: httpx.Client) -> None:
    response = client.get("/c/compiler/5.md")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/markdown; charset=utf-8"
    assert response.headers["vary"] == "Accept"
    assert response.headers["cache-control"] == "no-cache, no-store"
    assert "etag" not in response.headers and "last-modified" not in response.headers
    assert response.text.startswith("# compiler **URL:**")
    # Core answers every revalidation in full: no 304, whatever the request carries.
    again = client.get("/c/compiler/5.md", headers={"If-None-Match": "*",
                                                   "If-Modified-Since": "Fri, 01 Jan 2100 00:00:00 GMT"})
    assert again.status_code == 200 and again.content == response.content


def test_a_category_is_served_at_cores_routes_and_not_at_the_markdown_ones_core_lacks(client: httpx.Client) -> None:
    own = client.get("/c/compiler/5.md").text
    assert client.get("/latest.md?category=5&order=activity").text == own
    assert client.get("/latest.md?category=5&order=activity&page=1").text == client.get("/c/compiler/5.md?page=1").text
    assert client.get("/latest.md?category=12").text == client.get("/c/hardware/gpu/12.md").text
    assert client.get("/top.md?category=5&period=weekly").text.startswith("# compiler")
    assert client.get("/top.md?category=5").text != own
    for path in ("/c/compiler/5/l/top.md", "/c/compiler/5/l/latest.md", "/c/compiler/5/none.md", "/top/weekly.md",
                 "/tag/gpu/7/l/latest.md"):
        assert client.get(path).status_code == 404, path
    # TopicQuery lists what the reader may see of a category it does not know: nothing, and says no more
    nothing = client.get("/latest.md?category=999")
    assert nothing.status_code == 200 and "## [" not in nothing.text


def test_a_json_category_is_served_at_its_latest_and_top_routes() -> None:
    with FakeForum(mode="json") as forum, httpx.Client(base_url=forum.url, timeout=5) as client:
        own = client.get("/c/compiler/5.json").json()
        assert client.get("/c/compiler/5/l/latest.json?order=activity").json() == own
        assert client.get("/c/compiler/5/l/latest.json?order=activity&page=1").json() == \
            client.get("/c/compiler/5.json?page=1").json()
        assert client.get("/c/compiler/5/l/top.json?period=all").json() != own


def test_a_categorys_default_view_is_what_its_own_path_answers() -> None:
    """ListController#category_default: a category set to "Top" answers its own path with its top list; one
    sorted by likes (TopicQuery#default_results) holds its most liked topics first unless asked an order."""
    with FakeForum(json_lists=True, default_views={5: "top", 12: "likes"}) as forum, \
            httpx.Client(base_url=forum.url, timeout=5) as client:
        top = client.get("/top.md?category=5").text
        assert client.get("/c/compiler/5.md").text == top
        assert client.get("/c/compiler/5.json").json() == client.get("/c/compiler/5/l/top.json").json()
        assert client.get("/latest.md?category=5&order=activity").text != top
        likes = [t["like_count"] for t in client.get("/c/hardware/gpu/12.json").json()["topic_list"]["topics"]]
        assert likes == sorted(likes, reverse=True) and len(set(likes)) > 1
        latest = client.get("/c/hardware/gpu/12/l/latest.json?order=activity").json()["topic_list"]["topics"]
        assert [t["like_count"] for t in latest] != likes


@pytest.mark.parametrize("mode", ["markdown", "json"])
def test_the_directory_lists_subcategories_only_when_asked(mode: str) -> None:
    """CategoryList#find_categories: top-level categories with their `subcategory_ids`, every level below only
    with `include_subcategories=true` (nested in JSON, each with a `Parent:` line in Markdown)."""
    suffix = ".md" if mode == "markdown" else ".json"
    with FakeForum(mode=mode) as forum, httpx.Client(base_url=forum.url, timeout=5) as client:
        plain = client.get(f"/categories{suffix}").text
        every = client.get(f"/categories{suffix}?include_subcategories=true").text
    if mode == "markdown":
        assert "[gpu]" not in plain and "Parent:" not in plain and "[hardware]" in plain
        assert every.count("Parent: ") == 2 and "[graphs]" in every
        return
    top = json.loads(plain)["category_list"]["categories"]
    assert [c["id"] for c in top] == [5, 6, 11, 1] and all("subcategory_list" not in c for c in top)
    assert next(c for c in top if c["id"] == 11)["subcategory_ids"] == [12]
    nested = json.loads(every)["category_list"]["categories"]
    gpu = next(c for c in nested if c["id"] == 11)["subcategory_list"][0]
    assert (gpu["id"], gpu["parent_category_id"], gpu["subcategory_list"][0]["id"]) == (12, 11, 13)


def test_a_crawler_policy_refuses_every_anonymous_request_of_a_blocked_user_agent() -> None:
    """lib/middleware/anonymous_cache.rb: `403 Crawler is not allowed!`, no Content-Type, to a User-Agent core
    takes for a crawler and the policy does not allow; a browser's, an allowed one's and a keyed one pass."""
    with FakeForum(crawlers=Crawlers(allowed="Googlebot|feedbridge")) as allowing, \
            FakeForum(crawlers=Crawlers(allowed="Googlebot")) as strict, \
            FakeForum(crawlers=Crawlers(blocked="feedbridge|GPTBot")) as blocking:
        def status(forum: FakeForum, agent: str, **headers: str) -> tuple[int, str, str | None]:
            answer = httpx.get(f"{forum.url}/latest.md", headers={"User-Agent": agent, **headers}, timeout=5)
            return answer.status_code, answer.text[:23], answer.headers.get("content-type")
        assert status(strict, "feedbridge/0.1.0") == (403, "Crawler is not allowed!", None)
        assert status(strict, "curl/8.0")[0] == 403 and status(blocking, "GPTBot/1.1")[0] == 403
        assert status(blocking, "feedbridge/0.1.0 (+https://bridge.example/about)")[0] == 403
        assert status(allowing, "feedbridge/0.1.0")[0] == 200 and status(blocking, "curl/8.0")[0] == 200
        assert status(strict, "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0")[0] == 200
        assert status(strict, "feedbridge/0.1.0", **{"User-Api-Key": "k"})[0] != 403


@pytest.mark.parametrize(("kind", "first_hop"), [("login", "/login"), ("sso", "/session/sso"),
                                                 ("oauth", "/auth/oidc")])
def test_a_login_required_forum_sends_a_page_request_to_sign_in_and_refuses_json(kind: str, first_hop: str) -> None:
    """ApplicationController#redirect_to_login: a non-JSON GET goes to the sign-in route (single sign-on's on to
    another host), a JSON one gets 403 not_logged_in."""
    with FakeForum(login_required=kind) as forum, httpx.Client(base_url=forum.url, timeout=5) as client:
        page = client.get("/latest.md")
        assert (page.status_code, page.headers["location"]) == (302, forum.url + first_hop)
        hop = client.get(first_hop)
        if kind == "sso":
            assert hop.status_code == 302 and hop.headers["location"].startswith(SSO_PROVIDER)
        else:
            assert hop.status_code == 200 and "<form" in hop.text
        refused = client.get("/latest.json")
        assert refused.status_code == 403 and refused.json()["error_type"] == "not_logged_in"


def test_pages_map_to_page_files_and_other_parameters_are_ignored(client: httpx.Client) -> None:
    assert "**Page:** 2" in client.get("/c/compiler/5.md?page=1").text
    assert "**Page:** 3" in client.get("/c/compiler/5.md?page=2").text
    assert client.get("/c/compiler/5.md?page=0").text == client.get("/c/compiler/5.md").text
    assert client.get("/c/compiler/5.md?page=3").status_code == 404
    assert client.get("/top.md?period=yearly").text == client.get("/top.md").text
    assert client.get("/categories.md").status_code == 200
    assert client.get("/c/hardware/gpu/12.md").status_code == 200
    assert client.get("/nope.md").status_code == 404
    assert client.get("/../pyproject.toml").status_code == 404


def test_rewrites_saved_origins_to_its_own(upstream: FakeForum, client: httpx.Client) -> None:
    text = client.get("/c/compiler/5.md").text
    assert "dev-discuss.pytorch.org" not in text
    assert f"[Next page]({upstream.url}/c/compiler/5.md?page=1)" in text
    upstream.set_body("/c/widgets/9.md", "# widgets\n\n**URL:** https://forum.example.org/c/widgets/9.md\n")
    assert client.get("/c/widgets/9.md").text == f"# widgets\n\n**URL:** {upstream.url}/c/widgets/9.md\n"


def test_rewriting_can_be_turned_off() -> None:
    with FakeForum(rewrite=()) as forum:
        assert "https://dev-discuss.pytorch.org/t/" in httpx.get(f"{forum.url}/latest.md").text


def test_every_generated_page_parses_to_its_recorded_truth() -> None:
    expected = json.loads((PROJECT_ROOT / "fixtures" / "site-expected.json").read_text(encoding="utf-8"))
    # Every generated list page has its truth; the real capture (c/compiler/5.md, tested against its own
    # expected file), the categories directory and the topic pages are not topic lists made here.
    made = {p.relative_to(SITE).as_posix() for p in SITE.rglob("*.md")
            if p.name != "README.md" and p.parts[len(SITE.parts)] != "t"}
    assert set(expected) == made - {"c/compiler/5.md", "categories.md"}
    for relative, truth in expected.items():
        parsed = listing_to_dict(parse_listing((SITE / relative).read_text(encoding="utf-8"),
                                               source_url=truth["url"]))
        assert parsed["skipped"] == 0, relative
        assert {k: parsed[k] for k in truth} == truth, relative


def test_generated_fixtures_are_up_to_date() -> None:
    result = subprocess.run([sys.executable, "fixtures/make_site.py", "--check"], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout


# revalidation and redirects

def test_validators_as_a_proxy_in_front_adds_them_revalidate() -> None:
    with FakeForum(validators=True) as upstream, httpx.Client(base_url=upstream.url, timeout=5) as client:
        _revalidates(upstream, client)


def _revalidates(upstream: FakeForum, client: httpx.Client) -> None:
    first = client.get("/latest.md")
    assert first.headers["etag"].startswith('"')
    assert parsedate_to_datetime(first.headers["last-modified"]).tzinfo is not None
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    assert client.get("/latest.md", headers={"If-None-Match": etag}).status_code == 304
    assert client.get("/latest.md", headers={"If-None-Match": '"other"'}).status_code == 200
    assert client.get("/latest.md", headers={"If-Modified-Since": modified}).status_code == 304
    long_ago = "Mon, 01 Jan 2001 00:00:00 GMT"
    assert client.get("/latest.md", headers={"If-Modified-Since": long_ago}).status_code == 200
    upstream.set_body("/latest.md", "# Latest\n\nedited title\n")
    edited = client.get("/latest.md", headers={"If-None-Match": etag})
    assert edited.status_code == 200 and edited.headers["etag"] != etag
    upstream.clear()
    assert client.get("/latest.md", headers={"If-None-Match": etag}).status_code == 304


def test_tag_without_id_redirects_like_discourse(upstream: FakeForum, client: httpx.Client) -> None:
    response = client.get("/tag/gpu.md?page=1")
    assert response.status_code == 301
    assert response.headers["location"] == f"{upstream.url}/tag/gpu/7.md?page=1"
    assert client.get("/tag/gpu.md", follow_redirects=True).text.startswith("# gpu\n")
    assert client.get("/tag/cpu.md").status_code == 404


# faults

@pytest.mark.parametrize("status", [500, 502, 404, 410])
def test_status_faults(upstream: FakeForum, client: httpx.Client, status: int) -> None:
    upstream.fail("/latest.md", status, body="upstream says no")
    response = client.get("/latest.md")
    assert (response.status_code, response.text) == (status, "upstream says no")


def test_rate_limit_with_seconds_and_http_date(upstream: FakeForum, client: httpx.Client) -> None:
    upstream.rate_limit("/latest.md", 30)
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    upstream.rate_limit("/hot.md", when)
    assert client.get("/latest.md").headers["retry-after"] == "30"
    limited = client.get("/hot.md")
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "Wed, 02 Jan 2030 01:04:05 GMT"


def test_fault_matching_exact_prefix_and_times(upstream: FakeForum, client: httpx.Client) -> None:
    upstream.fail("/c/", 503, prefix=True)
    upstream.fail("/c/compiler/5.md?page=1", 410)
    upstream.fail("/latest.md", 500, times=2)
    assert client.get("/c/hardware/gpu/12.md").status_code == 503
    assert client.get("/c/compiler/5.md?page=1").status_code == 410
    assert client.get("/c/compiler/5.md?page=2").status_code == 503
    assert [client.get("/latest.md").status_code for _ in range(3)] == [500, 500, 200]
    upstream.clear()
    assert client.get("/c/hardware/gpu/12.md").status_code == 200


def test_stall_outlasts_a_read_timeout(upstream: FakeForum, client: httpx.Client) -> None:
    upstream.stall("/latest.md", 2)
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        client.get("/latest.md", timeout=httpx.Timeout(5, read=0.3))
    assert time.monotonic() - started < 1.5
    upstream.stall("/hot.md", 0.3)
    started = time.monotonic()
    assert client.get("/hot.md").status_code == 200
    assert time.monotonic() - started >= 0.3


def test_drip_sends_the_whole_body_slowly(upstream: FakeForum, client: httpx.Client) -> None:
    upstream.set_body("/slow.md", "x" * 400)
    upstream.drip("/slow.md", 1000)
    started = time.monotonic()
    assert client.get("/slow.md").text == "x" * 400
    assert time.monotonic() - started >= 0.35


def test_truncated_body_is_a_protocol_error(upstream: FakeForum, client: httpx.Client) -> None:
    upstream.truncate("/latest.md", keep=100, times=1)
    with client.stream("GET", "/latest.md") as response:
        assert int(response.headers["content-length"]) > 100
        with pytest.raises(httpx.RemoteProtocolError):
            response.read()
    assert client.get("/latest.md").status_code == 200  # once: the next request is served whole


@pytest.mark.parametrize("declare_length", [True, False])
def test_huge_body_is_streamed(upstream: FakeForum, client: httpx.Client, declare_length: bool) -> None:
    upstream.huge("/latest.md", size=20 * 2**20, declare_length=declare_length)
    with client.stream("GET", "/latest.md") as response:
        assert response.headers.get("content-length") == (str(20 * 2**20) if declare_length else None)
        assert sum(len(chunk) for chunk in response.iter_bytes()) == 20 * 2**20


def test_bad_utf8_html_and_json_bodies(upstream: FakeForum, client: httpx.Client) -> None:
    upstream.bad_utf8("/latest.md")
    upstream.html_login("/hot.md")
    upstream.json_error("/top.md")
    with pytest.raises(UnicodeDecodeError):
        client.get("/latest.md").content.decode("utf-8")
    login = client.get("/hot.md")
    assert login.status_code == 200 and login.headers["content-type"] == "text/html; charset=utf-8"
    assert "<form" in login.text
    denied = client.get("/top.md")
    assert denied.status_code == 403 and denied.json()["error_type"] == "invalid_access"


@pytest.mark.parametrize("location", ["/hot.md", "http://169.254.169.254/latest/meta-data/",
                                      "http://127.0.0.1:9/latest.md"])
def test_redirect_locations(upstream: FakeForum, client: httpx.Client, location: str) -> None:
    upstream.redirect("/latest.md", location, status=302)
    response = client.get("/latest.md")
    assert (response.status_code, response.headers["location"]) == (302, location)


def test_redirect_loop(upstream: FakeForum, client: httpx.Client) -> None:
    upstream.redirect("/a.md", "/b.md")
    upstream.redirect("/b.md", "/a.md")
    with pytest.raises(httpx.TooManyRedirects):
        client.get("/a.md", follow_redirects=True)


def test_connection_closed_without_response(upstream: FakeForum, client: httpx.Client) -> None:
    upstream.close("/latest.md")
    with pytest.raises(httpx.RemoteProtocolError):
        client.get("/latest.md")


def test_unknown_fault_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        Fault("explode")
    with pytest.raises(ValueError):
        Fault("redirect")


# request log

def test_request_log_and_counters(upstream: FakeForum, client: httpx.Client) -> None:
    client.get("/c/compiler/5.md", headers={"User-Agent": "probe/1"})
    client.get("/c/compiler/5.md?page=1")
    client.get("/latest.md")
    client.get("/__stats")  # control routes are not logged
    assert upstream.count() == 3
    assert upstream.count("/c/compiler/5.md") == 2
    assert upstream.count("/c/compiler/5.md?page=1") == 1
    assert upstream.count("/c/", prefix=True) == 2
    first = upstream.requests[0]
    assert (first.method, first.target, first.headers["user-agent"]) == ("GET", "/c/compiler/5.md", "probe/1")
    upstream.reset()
    assert upstream.count() == 0


def test_counting_is_thread_safe(upstream: FakeForum) -> None:
    def fetch() -> None:
        with httpx.Client(base_url=upstream.url) as client:
            for _ in range(10):
                assert client.get("/hot.md").status_code == 200

    threads = [threading.Thread(target=fetch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert upstream.count("/hot.md") == 80


# another process

def test_standalone_process_is_driven_over_http() -> None:
    with spawn() as forum:
        assert httpx.get(f"{forum.url}/latest.md").status_code == 200
        control = forum.control
        assert control.count("/latest.md") == 1 and control.stats()["total"] == 1
        control.rate_limit("/hot.md", 7, times=1)
        control.set_body("/new.md", "# new https://forum.example.org\n")
        assert httpx.get(f"{forum.url}/hot.md").headers["retry-after"] == "7"
        assert httpx.get(f"{forum.url}/hot.md").status_code == 200
        assert httpx.get(f"{forum.url}/new.md").text == f"# new {forum.url}\n"
        assert [r.target for r in control.requests][-1] == "/new.md"
        control.clear()
        control.reset()
        assert httpx.get(f"{forum.url}/new.md").status_code == 404
        assert control.count() == 1
        bad = httpx.post(f"{forum.url}/__fault", json={"path": "/x", "kind": "explode"})
        assert bad.status_code == 400
    assert forum.process.returncode is not None


def test_standalone_process_on_a_given_port() -> None:
    with FakeForum() as probe:  # a port that was free a moment ago
        port = probe.port
    with spawn("--no-rewrite", port=port) as forum:
        assert forum.url == f"http://127.0.0.1:{port}"
        assert "https://dev-discuss.pytorch.org" in httpx.get(f"{forum.url}/latest.md").text


def test_the_latest_posts_hold_regular_posts_only() -> None:
    """app/queries/latest_posts_query.rb `public_posts`: `where(post_type: Post.types[:regular])`: no moderator
    action, small action or whisper on `/posts.json`, though a topic's stream has them."""
    site = PostSite.standard()
    moderator = site.reply(9003, "alice", "<p>This topic is now a wiki.</p>")
    moderator.post_type = MODERATOR_ACTION
    with FakeForum(mode="json", posts=site.answer) as forum:
        stream = httpx.get(f"{forum.url}/t/9003.json", timeout=5).json()["post_stream"]["stream"]
        latest = httpx.get(f"{forum.url}/posts.json", timeout=5).json()["latest_posts"]
    assert moderator.id in stream and latest
    assert moderator.id not in {p["id"] for p in latest} and {p["post_type"] for p in latest} == {1}
    assert max(p["id"] for p in latest) == moderator.id - 1  # the newest post before it, so it was in reach
