"""A newcomer's first minutes: `feedbridge serve --demo` run as a subprocess with no network, the URLs it
prints opened, where `serve` listens, and what the front page says when the forum cannot be read.

The demo runs the real gunicorn service configured with the real forum, its fetches answered from the
package's copy; these tests read what it prints, open every URL kind it names (front page, feed, `.html`
view, OPML), and read the kernel's socket table to check that nothing listens beyond 127.0.0.1. Every feed
kind that needs the forum's JSON (post feeds, a user's own list, thresholds, tags, exclusions) answers from
the copy's JSON side in every format, and the demo's processes record every connection and host lookup they
make (Python's socket audit events), so a request that left for the internet would be seen.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import feedparser
import httpx
import pytest
from lxml import html

from feedbridge.config import Settings, parse_forum
from feedbridge.demo import FORUM_NAME, LocalCopy
from feedbridge.web.app import create_app
from tests.appserver import free_port, procfile_web, stop
from tests.test_render import assert_json_feed_1_1

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_HEX = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it


@dataclass
class Running:
    process: subprocess.Popen
    output: list[str]  # the lines printed before gunicorn's own
    urls: dict[str, str]  # label -> URL, as printed
    log: IO[str]  # everything it printed so far (seek to 0 and read)

    def printed(self) -> str:
        self.log.seek(0)
        return self.log.read()


@contextmanager
def serve(*args: str, env: dict[str, str] | None = None) -> Iterator[Running]:
    """Start `python3 -m feedbridge serve ARGS` from outside the repository and wait until it answers.

    Output goes to a file, never a pipe (a chatty server must not block on it); the working directory is
    a temporary one, so the demo can only be using the installed package's data, not `fixtures/`.
    """
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "WEB_CONCURRENCY": "1", **(env or {})}
    with tempfile.TemporaryDirectory() as cwd, tempfile.TemporaryFile("a+") as log:
        process = subprocess.Popen([sys.executable, "-m", "feedbridge", "serve", *args], cwd=cwd, env=full_env,
                                   stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 30
            while True:
                log.seek(0)
                text = log.read()
                urls = dict(re.findall(r"^ +(\S.*?\S) +(http://\S+)$", text, re.MULTILINE))
                bridge = re.search(r"http://127\.0\.0\.1:\d+/", text)
                if bridge and _answers(bridge[0] + "healthz"):
                    break
                assert process.poll() is None and time.monotonic() < deadline, text[-2000:]
                time.sleep(0.1)
            lines = text.splitlines()
            first = [line for line in lines if not line.startswith("[")][: len(urls) + 2]
            yield Running(process, first, urls or {"front page": bridge[0]}, log)
        finally:
            stop(process, grace=20)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def listening(port: int) -> set[str]:
    """The local addresses (hex, as the kernel writes them) of every TCP socket listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        lines = Path(table).read_text(encoding="utf-8").splitlines()[1:] if Path(table).exists() else []
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def port_of(url: str) -> int:
    return int(re.match(r"http://127\.0\.0\.1:(\d+)", url)[1])


# Every interpreter of the demo (the CLI, gunicorn's master and its forked workers) records each outbound
# connection and host lookup it makes (Python's audit events, raised by the socket module itself, gevent's
# included): what the demo asked of the network, whatever library asked.
SOCKET_AUDIT = """
import os, sys

_LOG = os.environ["DEMO_SOCKET_LOG"]


def _record(event, args):
    if event == "socket.connect" or event == "socket.getaddrinfo":
        with open(_LOG, "a", encoding="utf-8") as out:
            out.write(f"{event} {(args[1] if event == 'socket.connect' else args[0])!r}\\n")


with open(_LOG, "a", encoding="utf-8") as out:
    out.write(f"audited {os.getpid()}\\n")
sys.addaudithook(_record)
"""
LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")


@pytest.fixture(scope="module")
def socket_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit") / "sockets.log"


@pytest.fixture(scope="module")
def demo(socket_log: Path) -> Iterator[Running]:
    hook = socket_log.parent / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SOCKET_AUDIT, encoding="utf-8")
    env = {"PYTHONPATH": f"{hook}{os.pathsep}{ROOT}", "DEMO_SOCKET_LOG": str(socket_log)}
    with serve("--demo", "--port", "0", env=env) as running:
        yield running


def test_demo_says_where_it_listens_and_that_it_is_this_machine_only(demo: Running) -> None:
    assert "127.0.0.1 only" in demo.output[0] and f"{FORUM_NAME} (offline copy)" in demo.output[0]
    assert set(demo.urls) == {"front page", "Atom feed", "as a page", "OPML"}
    assert "Ctrl-C" in "\n".join(demo.output)
    assert listening(port_of(demo.urls["front page"])) == {LOOPBACK_HEX}


def test_demo_feed_urls_are_the_real_forums_on_every_run(demo: Running) -> None:
    bridge = demo.urls["front page"]
    assert demo.urls["Atom feed"] == f"{bridge}{FORUM_NAME}/c/compiler/5.atom"
    assert demo.urls["OPML"] == f"{bridge}{FORUM_NAME}/opml"


def test_demo_front_page_lists_the_forums_categories_and_previews_it(demo: Running) -> None:
    page = httpx.get(demo.urls["front page"], timeout=10)
    assert page.status_code == 200
    assert f">{FORUM_NAME} (offline copy)</option>" in page.text
    categories = re.findall(r'<option value="([\w/-]+/\d+)"', page.text)
    assert {"compiler/5", "distributed/6", "hardware/gpu/12"} <= set(categories)
    assert 'class="problem"' not in page.text
    assert re.search(r"\d+ entries", page.text)


def test_demo_feed_is_the_saved_copys_with_the_real_forums_links(demo: Running) -> None:
    response = httpx.get(demo.urls["Atom feed"], timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/atom+xml")
    feed = feedparser.parse(response.content)
    assert feed.bozo == 0
    assert len(feed.entries) == 30
    assert feed.feed.title == f"{FORUM_NAME} · compiler"
    assert all(entry.link.startswith(f"https://{FORUM_NAME}/t/") for entry in feed.entries)
    assert f"https://{FORUM_NAME}/t/3306" in {entry.id for entry in feed.entries}


def test_the_demos_transport_reads_the_copy_and_nothing_else() -> None:
    with httpx.Client(transport=LocalCopy()) as client:
        listed = client.get(f"https://{FORUM_NAME}/c/compiler/5.md?page=1")
        assert listed.status_code == 200 and listed.text.startswith("# ")
        # As the forum answers: no validators (core's lists send none), and a category at core's routes only.
        assert "etag" not in listed.headers and listed.headers["cache-control"] == "no-cache, no-store"
        assert client.get(f"https://{FORUM_NAME}/latest.md?category=5&order=activity&page=1").text == listed.text
        assert client.get(f"https://{FORUM_NAME}/top.md?category=5&period=all").status_code == 200
        assert client.get(f"https://{FORUM_NAME}/c/compiler/5/l/top.md").status_code == 404
        assert client.get(f"https://{FORUM_NAME}/c/compiler/5/l/latest.json?order=activity").json()["topic_list"]
        assert client.get(f"https://{FORUM_NAME}/t/x/3302.md").status_code == 404
        for elsewhere in ("https://example.org/latest.md", f"http://{FORUM_NAME}/latest.md"):
            with pytest.raises(httpx.ConnectError):
                client.get(elsewhere)


def test_demo_html_view_and_opml(demo: Running) -> None:
    view = httpx.get(demo.urls["as a page"], timeout=10)
    assert view.status_code == 200 and view.headers["content-type"].startswith("text/html")
    assert view.text.count("<li class=\"entry\">") == 30
    opml = httpx.get(demo.urls["OPML"], timeout=10)
    assert opml.status_code == 200
    feeds = re.findall(r'xmlUrl="([^"]+)"', opml.text)
    assert len(feeds) == 7  # latest and the six categories of the directory, the third level's included
    nested = next(url for url in feeds if url.endswith("/c/hardware/gpu/12.atom"))
    assert feedparser.parse(httpx.get(nested, timeout=10).content).bozo == 0


def test_demo_tag_list_redirects_as_discourse_does(demo: Running) -> None:
    tag = demo.urls["Atom feed"].replace("/c/compiler/5.atom", "/tag/gpu.rss")
    response = httpx.get(tag, timeout=10)
    assert response.status_code == 200
    feed = feedparser.parse(response.content)
    assert feed.bozo == 0 and len(feed.entries) == 10  # the tagged topics of tag/gpu/7.md


# Every feed kind that reads the forum's JSON (post feeds, a user's own list) or needs what only a JSON list
# carries (thresholds, tags, exclusions), and a digest: each answers from the copy, as for the real forum.
JSON_KINDS = {
    "a topic's posts": "t/467",
    "a topic's posts, by slug": "t/torch-compile-as-a-toolkit-manipulating-dynamo-outputs/3306",
    "the latest posts": "posts",
    "a user's posts": "u/Chillee/posts",
    "a user's posts, in full": "u/jansel/posts.FMT?content=full",
    "a user's topics": "u/ezyang",
    "min_likes": "c/compiler/5.FMT?min_likes=5",
    "min_views": "latest.FMT?min_views=100",
    "tag": "c/compiler/5.FMT?tag=rfc",
    "exclude_tag": "latest.FMT?exclude_tag=gpu",
    "tag=a+b": "latest.FMT?tag=gpu%2Bcuda",
    "a tag intersection": "tag/gpu+cuda",
    "exclude_category": "latest.FMT?exclude_category=11",
    "a daily digest": "c/compiler/5.FMT?digest=daily&min_replies=1",
}


def demo_feed(demo: Running, path: str, fmt: str) -> tuple[str, list[str]]:
    """The feed's title and entry ids, after checking it is a valid feed with at least one entry."""
    path = path.replace("FMT", fmt) if "FMT" in path else f"{path}.{fmt}"
    response = httpx.get(f"{demo.urls['front page']}{FORUM_NAME}/{path}", timeout=30)
    assert response.status_code == 200, f"{path}: {response.text[:300]}"
    if fmt == "json":
        document = json.loads(response.content)
        assert_json_feed_1_1(document)
        title, ids = document["title"], [item["id"] for item in document["items"]]
    else:
        feed = feedparser.parse(response.content)
        assert feed.bozo == 0, f"{path}: {feed.get('bozo_exception')}"
        title, ids = feed.feed.title, [entry.id for entry in feed.entries]
    assert ids, f"{path} has no entries"
    assert all(i.startswith(f"https://{FORUM_NAME}/") for i in ids)
    return title, ids


@pytest.mark.parametrize("fmt", ["atom", "rss", "json"])
@pytest.mark.parametrize("kind", list(JSON_KINDS))
def test_demo_answers_every_feed_kind_from_its_copy(demo: Running, kind: str, fmt: str) -> None:
    demo_feed(demo, JSON_KINDS[kind], fmt)


def test_demo_filters_keep_some_topics_and_drop_others(demo: Running) -> None:
    """The JSON lists' figures and tags tell topics apart: each filter keeps fewer than the list holds."""
    _, everything = demo_feed(demo, "c/compiler/5", "atom")
    _, liked = demo_feed(demo, "c/compiler/5.FMT?min_likes=5", "atom")
    assert 0 < len(liked) < len(everything)
    _, latest = demo_feed(demo, "latest", "atom")
    for query in ("exclude_tag=gpu", "tag=gpu%2Bcuda", "exclude_category=11"):
        _, kept = demo_feed(demo, f"latest.FMT?{query}", "atom")
        assert 0 < len(kept) < len(latest), query
    _, rfc = demo_feed(demo, "c/compiler/5.FMT?tag=rfc", "atom")
    assert set(rfc) == {f"https://{FORUM_NAME}/t/3341", f"https://{FORUM_NAME}/t/3441"}


def test_demo_post_feeds_are_titled_by_the_topic_and_the_user_as_the_forum_spells_them(demo: Running) -> None:
    title, ids = demo_feed(demo, "t/467", "atom")
    assert title == f"{FORUM_NAME} · Min-cut optimal(*) recomputation (i.e. activation checkpointing) with AOTAutograd"
    assert len(ids) == 12 and ids[0] == f"https://{FORUM_NAME}/t/467/12"  # both saved pages of the topic
    title, ids = demo_feed(demo, "u/chillee/posts", "rss")
    assert title.startswith(f"{FORUM_NAME} · posts by Chillee")
    assert all(re.fullmatch(rf"https://{re.escape(FORUM_NAME)}/t/\d+/\d+", i) for i in ids)


def test_demo_reads_json_from_its_copy_and_nothing_from_the_network(demo: Running, socket_log: Path) -> None:
    for path in JSON_KINDS.values():
        demo_feed(demo, path, "atom")
    fetched = set(re.findall(r"upstream GET (\S+) -> 200", demo.printed()))
    for document in ("/t/467.json", "/posts.json", "/user_actions.json?", "/topics/created-by/ezyang.json",
                     "/c/compiler/5/l/latest.json?order=activity", "/latest.json", "/tags/intersection/gpu/cuda.json",
                     "/categories.md?include_subcategories=true"):  # its Parent: lines name every level's children
        assert any(url.startswith(f"https://{FORUM_NAME}{document}") for url in fetched), document
    events = socket_log.read_text(encoding="utf-8").splitlines()
    assert len([e for e in events if e.startswith("audited ")]) >= 2  # the CLI and the gunicorn it became
    reached = [e for e in events if not e.startswith("audited ")]
    assert all(any(name in e for name in LOOPBACK_NAMES) for e in reached), reached
    assert not any(FORUM_NAME in e for e in events)


def test_the_demos_transport_maps_queries_onto_files_by_strict_patterns_only() -> None:
    with httpx.Client(transport=LocalCopy()) as client:
        def get(target: str) -> httpx.Response:
            return client.get(f"https://{FORUM_NAME}{target}")

        head = get("/t/467.json").json()
        ids = head["post_stream"]["stream"]
        batch = get(f"/t/467/posts.json?post_ids[]={ids[3]}&post_ids[]={ids[0]}").json()
        assert [p["id"] for p in batch["post_stream"]["posts"]] == [ids[0], ids[3]]
        newest = get("/posts.json").json()["latest_posts"]
        older = get(f"/posts.json?before={newest[1]['id']}").json()["latest_posts"]
        assert older and all(p["id"] < newest[1]["id"] for p in older)
        assert get("/user_actions.json?offset=0&username=CHILLEE&filter=4,5").json()["user_actions"]
        assert get("/topics/created-by/EZYANG.json").status_code == 200
        assert get("/c/compiler/5.json?page=1").json()["topic_list"]["topics"]
        below = get("/categories.json?parent_category_id=12").json()["category_list"]["categories"]
        assert [(c["id"], c["parent_category_id"]) for c in below] == [(13, 12)]
        for refused in ("/t/467/posts.json", "/t/467/posts.json?post_ids[]=1e3", "/posts.json?before=-1",
                        "/user_actions.json?username=../t/467&filter=4,5", "/user_actions.json?username=tom",
                        "/user_actions.json?username=tom&filter=4,5&offset=x", "/topics/created-by/..%2Fposts.json",
                        "/t/%2E%2E/posts.json", "/t/3302.json", "/categories.json?parent_category_id=../x"):
            response = get(refused)
            assert response.status_code == 404 and response.text == "not in the demo's offline copy\n", refused


def test_package_json_copy_is_what_its_generator_writes() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "fixtures" / "make_demo_json.py"), "--check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    copy = ROOT / "feedbridge" / "demo" / "json"
    assert sum(p.stat().st_size for p in copy.rglob("*") if p.is_file()) < 500_000


def test_demo_refuses_other_hosts() -> None:
    result = subprocess.run([sys.executable, "-m", "feedbridge", "serve", "--demo", "--host", "0.0.0.0"],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "--demo listens on 127.0.0.1 only" in result.stderr


def test_serve_binds_loopback_by_default_and_the_procfile_every_interface(upstream) -> None:
    env = {"FEEDBRIDGE_FORUMS": upstream.url}
    port = free_port()
    with serve("--port", str(port), env=env) as running:
        assert f"http://127.0.0.1:{port}/" in running.output[0] and "this machine only" in running.output[0]
        assert listening(port) == {LOOPBACK_HEX}
    with procfile_web({**env, "WEB_CONCURRENCY": "1"}) as (url, _):
        assert listening(port_of(url)) == {"00000000"}


def test_serve_on_a_port_in_use_says_so_in_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "feedbridge", "serve", "--port", str(port)], cwd=ROOT,
                                capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: cannot listen on 127.0.0.1 port {port}: Address already in use; choose another with --port")


def test_package_copy_of_the_forum_is_the_fixture_site() -> None:
    site, package = ROOT / "fixtures" / "site", ROOT / "feedbridge" / "demo" / "site"
    served = {p.relative_to(site) for p in site.rglob("*") if p.is_file()} - {Path("README.md")}
    assert served == {p.relative_to(package) for p in package.rglob("*") if p.is_file()}
    assert all((site / p).read_bytes() == (package / p).read_bytes() for p in served)


@pytest.mark.parametrize(("break_it", "headline"), [
    (lambda up: up.close("/latest.md"), "could not be reached (connection failed); feeds will appear when it is back"),
    (lambda up: up.stall("/latest.md", 3), "could not be reached (it did not answer in time)"),
    (lambda up: up.fail("/latest.md", 503), "is not answering normally (it answered 503)"),
    (lambda up: up.rate_limit("/latest.md"), "asked feedbridge to slow down (rate limited)"),
    (lambda up: up.fail("/latest.md", 404), "has no such page (it answered 404)"),
    (lambda up: up.html_login("/latest.md"), "did not show its topic lists (a login page"),
    (lambda up: up.challenge("/latest.md"), "turned feedbridge away with its bot protection"),
])
def test_front_page_says_in_words_why_the_forum_cannot_be_read(upstream, break_it, headline) -> None:
    break_it(upstream)
    app = create_app(Settings(forums=(parse_forum(upstream.url),), read_timeout=0.5, total_timeout=1))
    response = app.test_client().get("/")
    assert response.status_code == 200
    page = html.fromstring(response.data)
    said = page.get_element_by_id("preview-unavailable")
    key = upstream.url.split("://", 1)[1]
    assert said.text_content().startswith(f"{key} ") and headline in said.text_content()
    detail = said.getnext()
    assert detail.get("class") == "hint" and detail.text_content().startswith("Technical detail: ")
    assert key.split(":")[0] in detail.text_content() or "upstream" in detail.text_content()
    assert not page.xpath("//section[@id='result']//*[@role='alert' or contains(@class, 'problem')]")
