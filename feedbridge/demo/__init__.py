"""The offline demo behind `feedbridge serve --demo`: the service, reading a saved copy of a real forum.

A newcomer without a network (or before choosing a forum) should still see the whole product work: the
front page with categories and a live preview, real feeds, the `.html` views, OPML. So the package
carries the compiler category of dev-discuss.pytorch.org as the fake forum of the tests has it (the
Markdown lists, the categories directory, a few topic pages; `fixtures/make_site.py` writes this copy
from `fixtures/site/` and checks it), and beside it, in `json/`, what a Markdown forum is read through JSON
for: the JSON lists of the same pages (likes, views, tags, category ids), a user's own topic list, tag
intersections, the directory with its ids, and the saved topics' posts as topic documents, post batches,
the latest posts and users' actions, and its basic info with an icon and a logo of the copy's own under
`uploads/` (`fixtures/make_demo_json.py` writes and checks them). So every feed
kind and every filter answers as it does for the real forum.

The bridge is configured with the forum itself, `https://dev-discuss.pytorch.org`, so its forum key, every
title, feed URL and entry id are the ones a real deployment has, the same on every run. Its fetcher's
transport (`LocalCopy`, wired in by `feedbridge.demo.wsgi`) answers from the package's files instead of the
network: a request for any other host fails as a refused connection, so the demo reads nothing from the
internet. A reader following an entry's link goes to the real topic, as with any feed of that forum. It
answers as the forum does: at core's routes for a category's lists (`/latest.md?category=ID`,
`/top.md?category=ID`, `/c/SLUG/ID/l/latest.json`; no Markdown `/c/…/l/` list), and without validators
(core sends no ETag or Last-Modified on lists and topics, `Cache-Control: no-cache, no-store`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib.resources import files
from importlib.resources.abc import Traversable
from urllib.parse import parse_qs, unquote

import httpx

FORUM_NAME = "dev-discuss.pytorch.org"
ORIGIN = f"https://{FORUM_NAME}"
FORUM = f"markdown:{ORIGIN}"
"""What FEEDBRIDGE_FORUMS holds for the demo: the forum, read as Markdown (as the real one is), JSON only for
what Markdown lacks."""
NOTE = "offline copy"
"""Shown beside the forum's name on the front page, so nobody takes the demo's lists for today's."""
SITE: Traversable = files(__name__) / "site"
JSON_SITE: Traversable = files(__name__) / "json"
_ID = re.compile(r"[0-9]{1,12}")
_USERNAME = re.compile(r"[\w.-]{1,60}")  # what the feed routes take (feeds/request/spec.py ROUTES)
MAX_POST_IDS = 200
"""Post ids one batch request may name: the bridge asks for 50 (`feeds.sources.post_feeds.BATCH`)."""
_NOT_MARKDOWN = re.compile(r"(?:c|tag)/[^?]{1,600}/(?:l/[\w-]{1,30}|none)\.md|top/[\w-]{1,30}\.md")
"""What core's Markdown endpoints do not serve (lib/markdown_endpoint/controller_support.rb)."""


class LocalCopy(httpx.BaseTransport):
    """An httpx transport that answers requests to the forum from the package's copy, and no others."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https" or request.url.host != FORUM_NAME or request.method not in ("GET", "HEAD"):
            raise httpx.ConnectError(f"the demo reads only its offline copy of {FORUM_NAME}", request=request)
        status, headers, body = page(request.url.path, request.url.query.decode("ascii"))
        headers["Content-Length"] = str(len(body))
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body), request=request)


def page(path: str, query: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body for a path on the forum: its URL scheme mapped onto the saved files.

    `/c/compiler/5.md?page=2` is `c/compiler/5/page-2.md` (and `.json` the same under `json/`); other
    parameters (`period`, ...) are ignored as the saved lists hold one period; `/tag/NAME.md` answers 301 to
    `/tag/NAME/ID.md` as Discourse does. The JSON documents whose query names what they hold are in
    `_json_file`.
    """
    path = unquote(path)
    tag = re.fullmatch(r"/tag/([\w-]+)\.md", path)
    if tag and (SITE / "tag" / tag[1]).is_dir():
        ids = sorted(f.name for f in (SITE / "tag" / tag[1]).iterdir() if f.name.removesuffix(".md").isdigit())
        if ids:
            return 301, {"Location": f"{ORIGIN}/tag/{tag[1]}/{ids[0]}" + (f"?{query}" if query else "")}, b""
    params = parse_qs(query)
    asked = path.lstrip("/")
    relative = _core_route(asked, params)
    body, content_type = None, "text/markdown; charset=utf-8"
    if relative.endswith(".json"):
        body, content_type = _json_file(relative, params), "application/json; charset=utf-8"
    elif relative.endswith(".md") and not _NOT_MARKDOWN.fullmatch(asked):
        body = _read(SITE, _paged(relative, params))
    elif relative.startswith("uploads/") and relative.endswith(".svg"):  # the forum's icon and logo
        body, content_type = _read(JSON_SITE, relative), "image/svg+xml"
    if body is None:
        return 404, {"Content-Type": "text/plain; charset=utf-8"}, b"not in the demo's offline copy\n"
    return 200, {"Content-Type": content_type, "Cache-Control": "no-cache, no-store"}, body


def _core_route(relative: str, params: dict[str, list[str]]) -> str:
    """A category's lists where core serves them onto the copy's files: `/latest.md?category=ID` is the
    category's own list, `/top.md?category=ID` its top list (`c/SLUG/ID/l/top.md`), and
    `/c/SLUG/ID/l/latest.json` the JSON of `/c/SLUG/ID` (app/controllers/list_controller.rb)."""
    category = _one(params, "category") or ""
    if relative in ("latest.md", "top.md") and _ID.fullmatch(category):
        home = _category_home(SITE / "c", f"{int(category)}.md", "c")
        if home is None:
            return ""
        return f"{home}.md" if relative == "latest.md" else f"{home}/l/top.md"
    return relative.removesuffix("/l/latest.json") + ".json" if relative.endswith("/l/latest.json") else relative


def _category_home(folder: Traversable, name: str, at: str, depth: int = 3) -> str | None:
    """The path (`c/hardware/gpu/12`) of the list file `name` under `folder`, core's three levels deep."""
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name == name and entry.is_file():
            return f"{at}/{name.removesuffix('.md')}"
        if depth > 0 and entry.is_dir() and not entry.name.isdigit():
            found = _category_home(entry, name, f"{at}/{entry.name}", depth - 1)
            if found is not None:
                return found
    return None


def _paged(relative: str, params: dict[str, list[str]]) -> str:
    """`?page=N` (N > 0) is the file `page-N` in the folder named after the list's file."""
    number = params.get("page", ["0"])[-1]
    if not _ID.fullmatch(number) or int(number) == 0:
        return relative
    stem, _, extension = relative.rpartition(".")
    return f"{stem}/page-{int(number)}.{extension}"


def _json_file(relative: str, params: dict[str, list[str]]) -> bytes | None:
    """A JSON document of the copy. Where the query says what the answer holds, it maps onto a file (and
    a selection of it) only through strict patterns, never as raw text:

    - `/user_actions.json?username=U&filter=4,5&offset=N` is `user_actions/u.json` (`u/offset-N.json` past
      the first page), and `/topics/created-by/U.json` is `topics/created-by/u.json`: core finds a user by
      `username_lower` (app/controllers/application_controller.rb#fetch_user_from_params);
    - `/categories.json?parent_category_id=ID` is `categories/parent-ID.json`, the level below a category
      (app/controllers/categories_controller.rb#index);
    - `/t/ID/posts.json?post_ids[]=…` is the posts of `t/ID/posts.json` that are named, in its order
      (app/controllers/topics_controller.rb#posts);
    - `/posts.json?before=ID` is the posts of `posts.json` with smaller ids, as core pages its latest posts
      (app/queries/latest_posts_query.rb: `posts.id < before`).
    """
    if relative == "user_actions.json":
        name, offset = _one(params, "username") or "", _one(params, "offset") or "0"
        if not _USERNAME.fullmatch(name) or _one(params, "filter") != "4,5" or not _ID.fullmatch(offset):
            return None
        skip = int(offset)
        return _read(JSON_SITE, f"user_actions/{name.lower()}" + (f"/offset-{skip}.json" if skip else ".json"))
    if created := re.fullmatch(r"topics/created-by/([\w.-]{1,60})\.json", relative):
        relative = f"topics/created-by/{created[1].lower()}.json"
    if relative == "categories.json" and (parent := _one(params, "parent_category_id")) is not None:
        relative = f"categories/parent-{int(parent)}.json" if _ID.fullmatch(parent) else ""
    body = _read(JSON_SITE, _paged(relative, params))
    if body is None:
        return None
    if re.fullmatch(r"t/[0-9]{1,12}/posts\.json", relative):
        wanted = params.get("post_ids[]", [])
        if not wanted or len(wanted) > MAX_POST_IDS or not all(_ID.fullmatch(i) for i in wanted):
            return None
        named = {int(i) for i in wanted}
        return _kept(body, ("post_stream", "posts"), named.__contains__)
    if relative == "posts.json" and (before := _one(params, "before")) is not None:
        if not _ID.fullmatch(before):
            return None
        return _kept(body, ("latest_posts",), lambda post_id: post_id < int(before))
    return body


def _kept(body: bytes, where: tuple[str, ...], keep: Callable[[int], bool]) -> bytes:
    """The document with only the posts (at the path `where`) whose id `keep` accepts."""
    document = json.loads(body)
    holder = document
    for key in where[:-1]:
        holder = holder[key]
    holder[where[-1]] = [post for post in holder[where[-1]] if keep(post["id"])]
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def _one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[-1] if values else None


def _read(root: Traversable, relative: str) -> bytes | None:
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    file = root.joinpath(*parts)
    return file.read_bytes() if file.is_file() else None
