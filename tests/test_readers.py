"""Real feed readers from Debian against the bridge over HTTP: newsboat and sfeed.

newsboat runs non-interactively (`-x reload print-unread`) with its own urls, config and cache files in
a temporary HOME; what it stored is read back from its SQLite cache. It must see every entry with its
author, keep the same items when a topic's slug and title change upstream (ids are `/t/{id}`, never the
slug), and get a 304 once it revalidates. newsboat 2.21 stores the validators only from its second
download on (newsboat issue #2734), so the 304 is asserted on the third reload.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import feedparser
import httpx
import pytest

from tests.appserver import running_app, settings_for
from tests.upstream import FakeForum

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "site"
COMPILER = "/c/compiler/5"
RENAMED_ID = 3441



@pytest.fixture(autouse=True)
def readers_installed() -> None:
    """No skip when a reader is missing: these tests are the proof that real readers take our feeds."""
    missing = [tool for tool in ("newsboat", "sfeed") if shutil.which(tool) is None]
    assert not missing, f"{' and '.join(missing)} not installed: Debian packages that .ci/run installs"


@pytest.fixture
def app(upstream):
    # No cache TTL: every reload reaches the forum, so an upstream change shows on the next reload.
    with running_app(settings_for(upstream.url, cache_ttl=0, access_log=True)) as running:
        yield running


def newsboat_reload(home: Path, url: str) -> int:
    """One `newsboat -x reload print-unread` run; the number of unread articles it reports."""
    (home / "urls").write_text(url + "\n")
    (home / "config").write_text("")
    run = subprocess.run(
        ["newsboat", "-u", str(home / "urls"), "-C", str(home / "config"), "-c", str(home / "cache.db"),
         "-x", "reload", "print-unread"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(home), "LANG": "C.UTF-8"},
    )
    assert run.returncode == 0, run.stderr
    return int(re.fullmatch(r"(\d+) unread articles", run.stdout.strip())[1])


def newsboat_items(home: Path) -> dict[str, tuple[str, str]]:
    """guid -> (title, author) as newsboat stored them."""
    with sqlite3.connect(home / "cache.db") as db:
        rows = db.execute("SELECT guid, title, author FROM rss_item").fetchall()
    assert len(rows) == len({guid for guid, _, _ in rows})
    return {guid: (title, author) for guid, title, author in rows}


def renamed_list(text: str) -> str:
    """The category list with one topic's slug and title edited: only its id stays the same."""
    old_slug = re.search(rf"/t/([^/]+)/{RENAMED_ID}\)", text)[1]
    text = text.replace(f"/t/{old_slug}/{RENAMED_ID}", f"/t/zero-gc-arena-renamed/{RENAMED_ID}")
    return re.sub(rf"## \[[^\n]*?\]\((\S+/{RENAMED_ID})\)", r"## [Zero-GC arena (renamed)](\1)", text, count=1)


@pytest.mark.parametrize("fmt", ["atom", "rss"])
def test_newsboat_reads_every_entry_keeps_items_across_a_rename_and_gets_304(app, upstream, tmp_path, caplog, fmt):
    caplog.set_level("INFO", logger="feedbridge")
    url = app.feed_url(f"{COMPILER}.{fmt}")
    expected = {e.id: e.author for e in feedparser.parse(httpx.get(url, timeout=30).content).entries}
    assert len(expected) == 30

    assert newsboat_reload(tmp_path, url) == 30
    items = newsboat_items(tmp_path)
    assert set(items) == set(expected)
    assert {guid: author for guid, (_, author) in items.items()} == expected
    assert all(author for _, author in items.values())

    upstream.set_body(f"{COMPILER}.md", renamed_list((FIXTURES / "c/compiler/5.md").read_text(encoding="utf-8")))
    renamed = feedparser.parse(httpx.get(url, timeout=30).content).entries
    assert any(e.title == "Zero-GC arena (renamed)" and "zero-gc-arena-renamed" in e.link for e in renamed)
    assert newsboat_reload(tmp_path, url) == 30  # the same 30 items, none of them new
    assert set(newsboat_items(tmp_path)) == set(expected)

    assert newsboat_reload(tmp_path, url) == 30
    path = f"/{app.forum_key}{COMPILER}.{fmt}"
    statuses = [r.getMessage().split()[2] for r in caplog.records if r.getMessage().startswith(f"GET {path} ")]
    assert statuses[-1] == "304", statuses


@pytest.mark.parametrize("path", [f"{COMPILER}.atom", f"{COMPILER}.rss", "/latest.atom", "/latest.rss"])
def test_sfeed_reads_every_entry_with_its_author(app, path):
    body = httpx.get(app.feed_url(path), timeout=30).content
    entries = feedparser.parse(body).entries
    run = subprocess.run(["sfeed"], input=body, capture_output=True, timeout=30)
    assert run.returncode == 0, run.stderr
    rows = [line.split(b"\t") for line in run.stdout.splitlines()]
    assert len(rows) == len(entries) > 0
    # sfeed's TSV: timestamp, title, link, content, content-type, id, author, enclosure, category.
    assert [row[5].decode() for row in rows] == [e.id for e in entries]
    assert [row[6].decode() for row in rows] == [e.get("author", "") for e in entries]
    assert all(row[0].isdigit() for row in rows)  # every entry dated


@pytest.mark.parametrize("fmt", ["atom", "rss"])
def test_newsboat_and_sfeed_take_pictures_replies_comments_and_refresh_hints(tmp_path, fmt):
    """Issue 46's elements (media:thumbnail, Atom's link rel="replies" and thr:total, RSS comments, ttl and sy:,
    the forum's icon and language) leave every entry as it was to both readers: its id, title, author, and
    its link the topic's page, never the replies link beside it."""
    with FakeForum(mode="json") as forum, running_app(settings_for(forum.url, cache_ttl=60)) as app:
        url = app.feed_url(f"{COMPILER}.{fmt}")
        body = httpx.get(url, timeout=30).content
        for element in ([b"<media:thumbnail", b'rel="replies"', b"<thr:total>", b"<icon>", b'xml:lang="en"']
                        if fmt == "atom" else [b"<media:thumbnail", b"<comments>", b"<ttl>", b"<sy:updatePeriod>",
                                               b"<image>", b"<language>"]):
            assert element in body, element
        entries = feedparser.parse(body).entries
        assert newsboat_reload(tmp_path, url) == len(entries) == 30
        with sqlite3.connect(tmp_path / "cache.db") as db:
            stored = {guid: (title, author, link) for guid, title, author, link
                      in db.execute("SELECT guid, title, author, url FROM rss_item")}
        assert stored == {e.id: (e.title, e.author, e.link) for e in entries}
    run = subprocess.run(["sfeed"], input=body, capture_output=True, timeout=30)
    assert run.returncode == 0, run.stderr
    rows = [line.split(b"\t") for line in run.stdout.splitlines()]
    assert [(row[5].decode(), row[2].decode(), row[6].decode()) for row in rows] == [
        (e.id, e.link, e.author) for e in entries]
