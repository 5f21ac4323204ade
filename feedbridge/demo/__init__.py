"""The offline demo forum behind `feedbridge serve --demo`: a saved copy of a real forum, served on 127.0.0.1.

A newcomer without a network (or before choosing a forum) should still see the whole product work: the
front page with categories and a live preview, real feeds, the `.html` views, OPML. So the package
carries the compiler category of dev-discuss.pytorch.org as the fake forum of the tests has it (the
Markdown lists, the categories directory, a few topic pages; `fixtures/make_site.py` writes this copy
from `fixtures/site/` and checks it), and this module serves it from a small threaded HTTP server.

The forum lives under the subfolder `/dev-discuss.pytorch.org` of its server, so the bridge's forum key,
and with it every title and feed URL, names the forum it was saved from: `127.0.0.1:PORT/dev-discuss.
pytorch.org`. Served bodies have the forum's origin rewritten to that base URL, as the real forum's links
would point at the real forum: every link the bridge reads leads back here, and nothing reaches the
internet. Only GET and HEAD, only files of the package copy, and only on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import re
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any
from urllib.parse import parse_qs, unquote

FORUM_NAME = "dev-discuss.pytorch.org"
ORIGIN = f"https://{FORUM_NAME}"
HOST = "127.0.0.1"
SITE: Traversable = files(__name__) / "site"
# The package's files never change while it runs: one validator for all of them, as a static host sends.
STARTED = formatdate(usegmt=True)
MISSING = (
    "This is feedbridge's offline demo of {forum}: it holds the forum's topic lists, its categories and a few\n"
    "topic pages, but not this page. On the real forum it is {origin}{path}\n"
)


class DemoForum:
    """The demo forum on 127.0.0.1, in a background thread of the process that runs it.

    `port=0` takes a free port; `base_url` is what FEEDBRIDGE_FORUMS must hold for the bridge to read it.
    """

    def __init__(self, port: int = 0) -> None:
        self._httpd = ThreadingHTTPServer((HOST, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.demo = self  # type: ignore[attr-defined]
        self.port: int = self._httpd.server_address[1]
        self.base_url = f"http://{HOST}:{self.port}/{FORUM_NAME}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.2,),
                                        name="feedbridge-demo-forum", daemon=True)

    def start(self) -> DemoForum:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> DemoForum:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def page(self, target: str) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body for a request target: the forum's URL scheme mapped onto the saved files.

        `/c/compiler/5.md?page=2` is `c/compiler/5/page-2.md`; other parameters (`period`, ...) are ignored
        as the saved lists hold one period; `/tag/NAME.md` answers 301 to `/tag/NAME/ID.md` as Discourse does.
        A topic's own link (no `.md`) shows its Markdown as text when it was saved, and otherwise says where
        the real topic is.
        """
        path, _, query = target.partition("?")
        prefix = f"/{FORUM_NAME}"
        if not path.startswith(prefix + "/"):
            return _text(404, f"The demo forum is at {self.base_url}/latest.md\n")
        path = unquote(path[len(prefix):])
        tag = re.fullmatch(r"/tag/([\w-]+)\.md", path)
        if tag and (SITE / "tag" / tag[1]).is_dir():
            ids = sorted(f.name for f in (SITE / "tag" / tag[1]).iterdir() if f.name.removesuffix(".md").isdigit())
            if ids:
                return 301, {"Location": f"{self.base_url}/tag/{tag[1]}/{ids[0]}" + (f"?{query}" if query else "")}, b""
        relative = path.lstrip("/")
        page = parse_qs(query).get("page", ["0"])[-1]
        if page.isdigit() and int(page) > 0:
            relative = f"{relative.removesuffix('.md')}/page-{int(page)}.md"
        markdown = relative.endswith(".md")
        body = self._read(relative if markdown else relative + ".md")
        if body is None:
            return _text(404, MISSING.format(forum=FORUM_NAME, origin=ORIGIN, path=path))
        headers = {"Content-Type": f"text/{'markdown' if markdown else 'plain'}; charset=utf-8",
                   "ETag": f'"{hashlib.sha256(body).hexdigest()[:20]}"', "Last-Modified": STARTED}
        return 200, headers, body

    def _read(self, relative: str) -> bytes | None:
        parts = relative.split("/")
        if any(part in ("", ".", "..") for part in parts):
            return None
        file = SITE.joinpath(*parts)
        if not file.is_file():
            return None
        return file.read_bytes().replace(ORIGIN.encode(), self.base_url.encode())


def _text(status: int, message: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "text/plain; charset=utf-8"}, message.encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle keep-alive connection frees its thread eventually
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the bridge logs every upstream fetch itself, so the terminal shows each request once."""

    def do_GET(self) -> None:
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def _serve(self, head: bool) -> None:
        status, headers, body = self.server.demo.page(self.path)  # type: ignore[attr-defined]
        if status == 200 and self.headers.get("If-None-Match") == headers["ETag"]:
            status, body = 304, b""
        self.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)
