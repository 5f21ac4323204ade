"""RSSHub (the npm registry's `rsshub`) as the peer most users would pick, run as its users run it.

Its Discourse route `/discourse/:configId/official/:path` re-wraps the forum's own RSS list
(`{link}/{path}.rss`, `link` from the JSON in `DISCOURSE_CONFIG_{configId}`), so the fake forum serves
the same topics as a Discourse RSS list (`as_rss`). The registry's builds ship only RSSHub's library
build; `rsshub-node/server.mjs` puts its own app on its own HTTP server, as RSSHub's `lib/index.ts` does.
`ensure_installed()` (run by `bench/run` and the smoke test) puts it in the git-ignored
`bench/rsshub-node/node_modules` with `npm ci`: `package.json` pins RSSHub, `package-lock.json` the whole tree.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from email.utils import format_datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # `python -m bench.rsshub` runs on the bare interpreter: `.ci/run` installs RSSHub before
    from feedbridge.models import Listing  # the virtualenv (httpx, feedbridge's dependencies) is there

    from .procs import Procs

HERE = Path(__file__).resolve().parent / "rsshub-node"
CONFIG_ID = "bench"
RSS_TYPE = "application/rss+xml; charset=utf-8"


def available() -> bool:
    return (HERE / "node_modules" / "rsshub" / "package.json").exists() and shutil.which("node") is not None


def version() -> str:
    return json.loads((HERE / "node_modules" / "rsshub" / "package.json").read_text(encoding="utf-8"))["version"]


def pinned() -> str:
    return json.loads((HERE / "package.json").read_text(encoding="utf-8"))["dependencies"]["rsshub"]


def ensure_installed() -> None:
    """Install the pinned tree unless it is already there. Its browser-driving dependencies would download a
    browser at install time (impossible here, and no Discourse route needs one): that step is skipped.
    `.ci/run` runs two suites at once on one checkout: an exclusive lock on a file beside node_modules makes
    the second caller wait for the first one's `npm ci` (which deletes and rewrites the whole tree) and then
    find the tree in place, instead of both rewriting it under each other."""
    with (HERE / "node_modules.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if available() and version() == pinned():
            return
        env = {**os.environ, "PUPPETEER_SKIP_DOWNLOAD": "1", "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"}
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE, env=env,
                       check=True, timeout=900)


def start(procs: Procs, forum_url: str, name: str, cache: bool) -> tuple[str, subprocess.Popen]:
    """RSSHub's URL and process. `cache=False` sets its own switch for no cache (`CACHE_TYPE=""`), the
    counterpart of feedbridge's zero TTLs; otherwise its default in-memory cache (5 min for a route)."""
    from .procs import free_port  # here: see the imports above

    port = free_port()
    env = {"PORT": str(port), "NODE_ENV": "production", "LOGGER_LEVEL": "warn", "NO_LOGFILES": "1", "NO_RANDOM_UA": "1",
           f"DISCOURSE_CONFIG_{CONFIG_ID}": json.dumps({"link": forum_url, "key": "unused"})}
    if not cache:
        env["CACHE_TYPE"] = ""
    process = procs.start(name, ["node", str(HERE / "server.mjs")], f"http://127.0.0.1:{port}/healthz", env,
                          cwd=HERE, timeout=60)
    return f"http://127.0.0.1:{port}", process


def feed_url(base: str, list_path: str) -> str:
    """The Atom feed of the forum list at `list_path` (without `.rss`), e.g. `c/compiler/5`."""
    return f"{base}/discourse/{CONFIG_ID}/official/{list_path}?format=atom"


def as_rss(listing: Listing, rss_url: str) -> str:
    """The list as Discourse's own RSS list: the same topics, titles, excerpts, authors and dates."""
    host = urlsplit(listing.base_url).netloc
    items = []
    for t in listing.topics:
        when = f"<pubDate>{format_datetime(t.last_posted_at)}</pubDate>" if t.last_posted_at else ""
        description = f"<p>{escape(t.excerpt or '')}</p><p><small>{(t.replies or 0) + 1} posts</small></p>" \
                      f'<p><a href="{escape(t.url)}">Read full topic</a></p>'
        items.append(
            f"<item><title>{escape(t.title)}</title><dc:creator><![CDATA[{t.author or ''}]]></dc:creator>"
            f"<description><![CDATA[{description}]]></description><link>{escape(t.url)}</link>{when}"
            f'<guid isPermaLink="false">{host}-topic-{t.id}</guid></item>'
        )
    return ('<?xml version="1.0" encoding="UTF-8" ?>\n<rss version="2.0" xmlns:discourse="http://www.discourse.org/"'
            ' xmlns:atom="http://www.w3.org/2005/Atom" xmlns:dc="http://purl.org/dc/elements/1.1/"><channel>'
            f"<title>{escape(listing.title)}</title><link>{escape(listing.url or listing.base_url)}</link>"
            f"<description>Topics in {escape(listing.title)}</description>"
            f'<atom:link href="{escape(rss_url)}" rel="self" type="application/rss+xml" />\n'
            + "\n".join(items) + "\n</channel></rss>\n")


if __name__ == "__main__":
    ensure_installed()
