"""RSS-Bridge (Debian's package) as the peer for target 2, served by `php -S` from a private copy.

RSS-Bridge has no Discourse bridge, so its generic XPath bridge reads the same topic list served as
HTML by the same fake forum. The copy lets this run have its own config (custom cache timeouts, so
`_cache_timeout=0` forces a cold build) and cache directory, without touching /etc.
"""

from __future__ import annotations

import html
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlencode

from feedbridge.models import Listing

from .procs import Procs, free_port

INSTALLED = Path("/usr/share/rss-bridge")
PHP_WORKERS = 2  # as many processes as gunicorn's default workers
CONFIG = """; <?php exit; ?> DO NOT REMOVE THIS LINE
[cache]
type = "file"
custom_timeout = true
[error]
output = "http"
"""
XPATHS = {
    "item": '//tr[@class="topic-list-item"]',
    "title": './/a[@class="title"]',
    "content": './/p[@class="excerpt"]',
    "uri": './/a[@class="title"]/@href',
    "author": './/td[@class="posters"]/a',
    "timestamp": ".//time/@datetime",
}


def available() -> bool:
    return (INSTALLED / "index.php").exists() and shutil.which("php") is not None


def start(procs: Procs) -> tuple[str, subprocess.Popen]:
    """RSS-Bridge's URL and its `php -S` process (the parent of its workers)."""
    root = procs.workdir / "rss-bridge"
    own = {"cache", "config.ini.php", "whitelist.txt"}  # links into /etc and /var in the package
    shutil.copytree(INSTALLED, root, ignore=lambda folder, names: own & set(names) if Path(folder) == INSTALLED else ())
    (root / "cache").mkdir()
    (root / "config.ini.php").write_text(CONFIG)
    (root / "whitelist.txt").write_text("XPath\n")
    port = free_port()
    command = ["php", "-d", "opcache.enable_cli=1", "-d", "display_errors=0", "-S", f"127.0.0.1:{port}",
               "-t", str(root)]
    process = procs.start("rss-bridge", command, f"http://127.0.0.1:{port}/",
                          {"PHP_CLI_SERVER_WORKERS": str(PHP_WORKERS)}, cwd=root)
    return f"http://127.0.0.1:{port}", process


def feed_url(bridge: str, page_url: str, cold: bool) -> str:
    params = {"action": "display", "bridge": "XPath", "format": "Atom", "url": page_url, **XPATHS}
    if cold:
        params["_cache_timeout"] = "0"
    return f"{bridge}/?{urlencode(params)}"


def as_html(listing: Listing) -> str:
    """The list as a Discourse-like HTML table: the same topics, titles, excerpts, authors and dates."""
    esc = html.escape
    rows = []
    for t in listing.topics:
        when = t.last_posted_at.isoformat() if t.last_posted_at else ""
        rows.append(
            f'<tr class="topic-list-item"><td class="main-link"><a class="title" href="{esc(t.url)}">{esc(t.title)}</a>'
            f'<p class="excerpt">{esc(t.excerpt or "")}</p></td>'
            f'<td class="posters"><a href="{esc(t.author_url or "")}">{esc(t.author or "")}</a></td>'
            f'<td class="replies">{t.replies or 0}</td>'
            f'<td class="activity"><time datetime="{when}">{when}</time></td></tr>'
        )
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(listing.title)}</title></head>'
            f'<body><div id="main-outlet"><h1>{esc(listing.title)}</h1><table class="topic-list"><tbody>\n'
            + "\n".join(rows) + "\n</tbody></table></div></body></html>\n")


