"""A newcomer's first minutes: `feedbridge serve --demo` run as a subprocess with no network, the URLs it
prints opened, where `serve` listens, and what the front page says when the forum cannot be read.

The demo runs the real gunicorn service configured with the real forum, its fetches answered from the
package's copy; these tests read what it prints, open every URL kind it names (front page, feed, `.html`
view, OPML), and read the kernel's socket table to check that nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

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

import feedparser
import httpx
import pytest
from lxml import html

from feedbridge.config import Settings, parse_forum
from feedbridge.demo import FORUM_NAME, LocalCopy
from feedbridge.web.app import create_app
from tests.appserver import free_port, procfile_web, stop

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_HEX = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it


@dataclass
class Running:
    process: subprocess.Popen
    output: list[str]  # the lines printed before gunicorn's own
    urls: dict[str, str]  # label -> URL, as printed


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
            yield Running(process, first, urls or {"front page": bridge[0]})
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


@pytest.fixture(scope="module")
def demo() -> Iterator[Running]:
    with serve("--demo", "--port", "0") as running:
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
        again = client.get(f"https://{FORUM_NAME}/c/compiler/5.md?page=1", headers={"If-None-Match": listed.headers["ETag"]})
        assert again.status_code == 304
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
    assert len(feeds) == 6  # latest and the five categories of the directory
    nested = next(url for url in feeds if url.endswith("/c/hardware/gpu/12.atom"))
    assert feedparser.parse(httpx.get(nested, timeout=10).content).bozo == 0


def test_demo_tag_list_redirects_as_discourse_does(demo: Running) -> None:
    tag = demo.urls["Atom feed"].replace("/c/compiler/5.atom", "/tag/gpu.rss")
    response = httpx.get(tag, timeout=10)
    assert response.status_code == 200
    feed = feedparser.parse(response.content)
    assert feed.bozo == 0 and len(feed.entries) == 10  # the tagged topics of tag/gpu/7.md


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
