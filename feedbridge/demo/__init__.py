"""The offline demo behind `feedbridge serve --demo`: the service, reading a saved copy of a real forum.

A newcomer without a network (or before choosing a forum) should still see the whole product work: the
front page with categories and a live preview, real feeds, the `.html` views, OPML. So the package
carries the compiler category of dev-discuss.pytorch.org as the fake forum of the tests has it (the
Markdown lists, the categories directory, a few topic pages; `fixtures/make_site.py` writes this copy
from `fixtures/site/` and checks it).

The bridge is configured with the forum itself, `https://dev-discuss.pytorch.org`, so its forum key, every
title, feed URL and entry id are the ones a real deployment has, the same on every run. Its fetcher's
transport (`LocalCopy`, wired in by `feedbridge.demo.app`) answers from the package's files instead of the
network: a request for any other host fails as a refused connection, so the demo reads nothing from the
internet. A reader following an entry's link goes to the real topic, as with any feed of that forum.
"""

from __future__ import annotations

import hashlib
import re
from email.utils import formatdate
from importlib.resources import files
from importlib.resources.abc import Traversable
from urllib.parse import parse_qs, unquote

import httpx

FORUM_NAME = "dev-discuss.pytorch.org"
ORIGIN = f"https://{FORUM_NAME}"
FORUM = f"markdown:{ORIGIN}"
"""What FEEDBRIDGE_FORUMS holds for the demo: the forum, read as Markdown (the copy has no JSON lists)."""
NOTE = "offline copy"
"""Shown beside the forum's name on the front page, so nobody takes the demo's lists for today's."""
SITE: Traversable = files(__name__) / "site"
# The package's files never change while it runs: one validator for all of them, as a static host sends.
STARTED = formatdate(usegmt=True)


class LocalCopy(httpx.BaseTransport):
    """An httpx transport that answers requests to the forum from the package's copy, and no others."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https" or request.url.host != FORUM_NAME or request.method not in ("GET", "HEAD"):
            raise httpx.ConnectError(f"the demo reads only its offline copy of {FORUM_NAME}", request=request)
        status, headers, body = page(request.url.path, request.url.query.decode("ascii"))
        if status == 200 and request.headers.get("If-None-Match") == headers["ETag"]:
            status, body = 304, b""
        headers["Content-Length"] = str(len(body))
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body), request=request)


def page(path: str, query: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body for a path on the forum: its URL scheme mapped onto the saved files.

    `/c/compiler/5.md?page=2` is `c/compiler/5/page-2.md`; other parameters (`period`, ...) are ignored
    as the saved lists hold one period; `/tag/NAME.md` answers 301 to `/tag/NAME/ID.md` as Discourse does.
    """
    path = unquote(path)
    tag = re.fullmatch(r"/tag/([\w-]+)\.md", path)
    if tag and (SITE / "tag" / tag[1]).is_dir():
        ids = sorted(f.name for f in (SITE / "tag" / tag[1]).iterdir() if f.name.removesuffix(".md").isdigit())
        if ids:
            return 301, {"Location": f"{ORIGIN}/tag/{tag[1]}/{ids[0]}" + (f"?{query}" if query else "")}, b""
    relative = path.lstrip("/")
    number = parse_qs(query).get("page", ["0"])[-1]
    if number.isdigit() and int(number) > 0:
        relative = f"{relative.removesuffix('.md')}/page-{int(number)}.md"
    body = _read(relative) if relative.endswith(".md") else None
    if body is None:
        return 404, {"Content-Type": "text/plain; charset=utf-8"}, b"not in the demo's offline copy\n"
    headers = {"Content-Type": "text/markdown; charset=utf-8", "ETag": f'"{hashlib.sha256(body).hexdigest()[:20]}"',
               "Last-Modified": STARTED}
    return 200, headers, body


def _read(relative: str) -> bytes | None:
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    file = SITE.joinpath(*parts)
    return file.read_bytes() if file.is_file() else None
