"""A fake Discourse forum on 127.0.0.1 that serves `fixtures/site/` and misbehaves on demand.

Tests never reach the internet; everything that fetches (the web service, the static CLI, gunicorn
workers, benchmarks, browser tests) points at this server instead. It is a real HTTP/1.1 server over a
real socket, so timeouts, keep-alive, redirects and half-sent bodies behave as they would upstream.

URL -> file: the path maps to the same path under the root (`/c/compiler/5.md` -> `c/compiler/5.md`);
`?page=N` with N > 0 maps to a directory named after the file (`c/compiler/5/page-N.md`); `?page=0` and
every other query parameter (`period`, `order`, ...) are ignored. `/tag/NAME.md` answers 301 to
`/tag/NAME/ID.md` when that file exists, as Discourse does.

Served bodies have `https://dev-discuss.pytorch.org` and `https://forum.example.org` replaced by the
server's own base URL, so every link in the fake forum leads back to it (`rewrite=()` turns that off).
Every 200 carries an ETag (hash of the body) and Last-Modified, and If-None-Match / If-Modified-Since
get a 304 unless `conditional=False`.

Use it in-process (`with FakeForum() as forum:` or the `upstream` pytest fixture), or as a separate
process for gunicorn tests and benchmarks: `python -m tests.upstream --port 8123 [--root fixtures/site]`
prints its base URL and serves until killed; `spawn()` does that for you and returns a handle whose
`control` (a `RemoteForum`) has the same request-log, fault and body API over `/__stats`,
`/__requests`, `/__reset`, `/__fault`, `/__clear` and `/__body`. Requests to `/__*` are not logged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mimetypes
import re
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from email.utils import format_datetime, formatdate, parsedate_to_datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = PROJECT_ROOT / "fixtures" / "site"
REWRITTEN_ORIGINS = ("https://dev-discuss.pytorch.org", "https://forum.example.org")
FAULT_KINDS = ("status", "stall", "drip", "truncate", "huge", "bad_utf8", "html", "json_error", "redirect",
               "close")
MARKDOWN = "text/markdown; charset=utf-8"
LOGIN_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Log In - Fake Forum</title></head>
<body><div id="main-outlet"><h1>Log In</h1><form id="login-form" action="/session" method="post">
<input name="login" placeholder="Email / Username"><input name="password" type="password">
<button type="submit">Log In</button></form></div></body></html>
"""
JSON_ERROR = json.dumps({"errors": ["You are not permitted to view the requested resource."],
                         "error_type": "invalid_access"})
HUGE_LINE = b"A very large page keeps going and going, long past any sane size limit.\n"


def compression_bomb(decoded_size: int, codings: str = "gzip") -> bytes:
    """`decoded_size` zero bytes (a multiple of 1 MiB) under `codings` as a `Content-Encoding` lists them,
    e.g. "gzip", "deflate", "gzip, gzip": serve it with that header. 1 GiB is 1 MB under one gzip layer
    and 2.5 KB under two.

    The innermost layer is built from one compressed 1 MiB segment repeated: after a full flush, deflate
    emits the same bytes for the same input, so a 3 GiB bomb takes a fraction of a second, not minutes.
    """
    block = 1 << 20
    if decoded_size % block:
        raise ValueError("decoded_size must be a multiple of 1 MiB")
    layers = [c.strip() for c in codings.split(",")]
    encoder = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    zeros = bytes(block)
    segment = encoder.compress(zeros) + encoder.flush(zlib.Z_FULL_FLUSH)
    deflated = segment * (decoded_size // block) + encoder.flush()
    if layers[0] not in ("gzip", "deflate"):
        raise ValueError(f"unknown coding {layers[0]!r}")
    check = 0 if layers[0] == "gzip" else 1
    for _ in range(decoded_size // block):
        check = (zlib.crc32 if layers[0] == "gzip" else zlib.adler32)(zeros, check)
    if layers[0] == "gzip":
        header, trailer = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff", struct.pack("<II", check, decoded_size % 2**32)
    else:
        header, trailer = b"\x78\xda", struct.pack(">I", check)
    body = header + deflated + trailer
    for coding in layers[1:]:
        body = zlib.compress(body, 9, wbits=31 if coding == "gzip" else zlib.MAX_WBITS)
    return body


@dataclass(frozen=True)
class Fault:
    """How to misbehave for a matching request. Fields not used by `kind` are ignored.

    `delay` (seconds before the status line) applies to every kind; kind "stall" is a delay followed
    by the normal response. `status`, `body` and `headers` override the kind's defaults.
    """

    kind: str
    status: int | None = None
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    rate: int = 100  # drip: bytes per second
    keep: int | None = None  # truncate: bytes actually sent (default: half the body)
    size: int = 20 * 2**20  # huge: body size in bytes
    declare_length: bool = True  # huge: send Content-Length, else close-delimited
    location: str | None = None  # redirect target

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {FAULT_KINDS}")
        if self.kind == "redirect" and not self.location:
            raise ValueError("a redirect fault needs a location")


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # path with query, as sent
    headers: dict[str, str]  # lower-cased names
    time: float

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]


def _matches(request: Request, path: str | None, prefix: bool) -> bool:
    if path is None:
        return True
    return request.target.startswith(path) if prefix else path in (request.path, request.target)


@dataclass
class _Armed:
    fault: Fault
    remaining: int | None


@dataclass(frozen=True)
class _Body:
    content: bytes
    status: int
    headers: dict[str, str]
    modified: float


class _Controls:
    """Convenience fault builders shared by the in-process server and its remote control.

    `prefix=True` matches every request target starting with `path`; otherwise `path` must equal the
    target exactly (query included). `times=N` misbehaves N times, then serves normally again.
    """

    def set_fault(self, path: str, fault: Fault, *, prefix: bool = False, times: int | None = None) -> None:
        raise NotImplementedError

    def fail(self, path: str, status: int = 500, body: str | None = None, **arming: Any) -> None:
        self.set_fault(path, Fault("status", status=status, body=body), **arming)

    def rate_limit(self, path: str, retry_after: int | str | datetime = 60, **arming: Any) -> None:
        if isinstance(retry_after, datetime):
            retry_after = format_datetime(retry_after.astimezone(timezone.utc), usegmt=True)
        self.set_fault(path, Fault("status", status=429, headers={"Retry-After": str(retry_after)}), **arming)

    def stall(self, path: str, seconds: float, **arming: Any) -> None:
        self.set_fault(path, Fault("stall", delay=seconds), **arming)

    def drip(self, path: str, bytes_per_second: int, **arming: Any) -> None:
        self.set_fault(path, Fault("drip", rate=bytes_per_second), **arming)

    def truncate(self, path: str, keep: int | None = None, **arming: Any) -> None:
        self.set_fault(path, Fault("truncate", keep=keep), **arming)

    def huge(self, path: str, size: int = 20 * 2**20, declare_length: bool = True, **arming: Any) -> None:
        self.set_fault(path, Fault("huge", size=size, declare_length=declare_length), **arming)

    def bad_utf8(self, path: str, **arming: Any) -> None:
        self.set_fault(path, Fault("bad_utf8"), **arming)

    def html_login(self, path: str, status: int = 200, **arming: Any) -> None:
        self.set_fault(path, Fault("html", status=status), **arming)

    def json_error(self, path: str, status: int = 403, **arming: Any) -> None:
        self.set_fault(path, Fault("json_error", status=status), **arming)

    def redirect(self, path: str, location: str, status: int = 301, **arming: Any) -> None:
        self.set_fault(path, Fault("redirect", status=status, location=location), **arming)

    def close(self, path: str, **arming: Any) -> None:
        self.set_fault(path, Fault("close"), **arming)


class FakeForum(_Controls):
    """The server, in a background thread. Thread-safe: tests change faults while requests run."""

    def __init__(self, root: Path | str = DEFAULT_ROOT, *, host: str = "127.0.0.1", port: int = 0,
                 rewrite: tuple[str, ...] = REWRITTEN_ORIGINS, conditional: bool = True) -> None:
        self.root = Path(root).resolve()
        self.rewrite = tuple(rewrite)
        self.conditional = conditional
        self._lock = threading.Lock()
        self._log: list[Request] = []
        self._faults: dict[tuple[str, bool], _Armed] = {}
        self._bodies: dict[str, _Body] = {}
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer((host, port), _Handler, bind_and_activate=False)
        self._httpd.daemon_threads = True
        self._httpd.request_queue_size = 128  # benchmarks open many connections at once
        self._httpd.forum = self  # type: ignore[attr-defined]
        self._httpd.server_bind()
        self._httpd.server_activate()
        self.port: int = self._httpd.server_address[1]
        self.url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}"
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> FakeForum:
        # A short poll interval: stop() waits for it, and every test stops a server.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name=f"fake-forum:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes stalled and dripping responses
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeForum:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # request log
    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._log)

    def count(self, path: str | None = None, *, prefix: bool = False) -> int:
        """Requests whose path or full target equals `path` (all requests when None)."""
        return sum(_matches(r, path, prefix) for r in self.requests)

    def reset(self) -> None:
        with self._lock:
            self._log.clear()

    def stats(self) -> dict[str, Any]:
        requests = self.requests
        return {"total": len(requests), "targets": dict(Counter(r.target for r in requests))}

    # runtime changes
    def set_fault(self, path: str, fault: Fault, *, prefix: bool = False, times: int | None = None) -> None:
        with self._lock:
            self._faults[(path, prefix)] = _Armed(fault, times)

    def set_body(self, path: str, text: str | bytes, *, status: int = 200,
                 headers: dict[str, str] | None = None) -> None:
        """Serve `text` for `path` (resolved like a file, so `?page=N` counts) until `clear()`."""
        content = text.encode() if isinstance(text, str) else text
        with self._lock:
            self._bodies[self._resource(path)] = _Body(content, status, dict(headers or {}), time.time())

    def clear(self) -> None:
        """Back to the pristine forum: no faults, no overridden bodies. The request log is kept."""
        with self._lock:
            self._faults.clear()
            self._bodies.clear()

    # used by the handler
    def _record(self, request: Request) -> None:
        with self._lock:
            self._log.append(request)

    def _take_fault(self, target: str) -> Fault | None:
        with self._lock:
            key = (target, False)
            if key not in self._faults:
                prefixes = [k for k in self._faults if k[1] and target.startswith(k[0])]
                if not prefixes:
                    return None
                key = max(prefixes, key=lambda k: len(k[0]))
            armed = self._faults[key]
            if armed.remaining is not None:
                armed.remaining -= 1
                if armed.remaining <= 0:
                    del self._faults[key]
            return armed.fault

    @staticmethod
    def _resource(target: str) -> str:
        path, _, query = target.partition("?")
        relative = path.lstrip("/")
        page = parse_qs(query).get("page", ["0"])[-1]
        if page.isdigit() and int(page) > 0:
            stem, dot, ext = relative.rpartition(".")
            relative = f"{stem}/page-{page}.{ext}" if dot else f"{relative}/page-{page}"
        return relative

    def _tag_redirect(self, target: str) -> str | None:
        path, _, query = target.partition("?")
        match = re.fullmatch(r"/tag/([^/]+)\.md", path)
        if not match or not (self.root / "tag" / match[1]).is_dir():
            return None
        ids = sorted(p.stem for p in (self.root / "tag" / match[1]).glob("*.md") if p.stem.isdigit())
        if not ids:
            return None
        return f"{self.url}/tag/{match[1]}/{ids[0]}.md" + (f"?{query}" if query else "")

    def _load(self, target: str) -> _Body | None:
        relative = self._resource(target)
        with self._lock:
            override = self._bodies.get(relative)
        if override is None:
            file = (self.root / relative).resolve()
            if not file.is_relative_to(self.root) or not file.is_file():
                return None
            override = _Body(file.read_bytes(), 200, {}, file.stat().st_mtime)
        content = override.content
        for origin in self.rewrite:
            content = content.replace(origin.encode(), self.url.encode())
        return _Body(content, override.status, override.headers, override.modified)


def _content_type(target: str) -> str:
    path = target.partition("?")[0]
    if path.endswith(".md"):
        return MARKDOWN
    guessed = mimetypes.guess_type(path)[0] or "application/octet-stream"
    return f"{guessed}; charset=utf-8" if guessed.startswith("text/") or guessed.endswith("json") else guessed


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60  # idle keep-alive connections free their thread eventually
    disable_nagle_algorithm = True  # headers and body go out in separate writes: avoid 40 ms stalls
    server: ThreadingHTTPServer

    @property
    def forum(self) -> FakeForum:
        return self.server.forum  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the request log is the record, stderr noise only hides test output."""

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        if self.path.startswith("/__"):
            self._control()
        else:
            self._serve(head=False)

    def do_POST(self) -> None:
        if self.path.startswith("/__"):
            self._control()
        else:
            self._send(405, {"Allow": "GET, HEAD"}, b"")

    # plumbing
    def _send_head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _send(self, status: int, headers: dict[str, str], body: bytes, *, head: bool = False) -> None:
        """`headers` may override Content-Length (a truncated body announces more than it sends)."""
        self._send_head(status, {"Content-Length": str(len(body)), **headers})
        if not head:
            self.wfile.write(body)

    def _stream(self, chunks: Iterator[bytes]) -> None:
        try:
            for chunk in chunks:
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # the forum
    def _serve(self, head: bool) -> None:
        forum = self.forum
        forum._record(Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                              time.time()))
        fault = forum._take_fault(self.path)
        if fault and fault.delay and forum._stopping.wait(fault.delay):
            self.close_connection = True
            return
        if fault and fault.kind not in ("stall", "drip", "truncate", "bad_utf8"):
            self._misbehave(fault, head)
            return
        location = forum._tag_redirect(self.path)
        if location:
            self._send(301, {"Location": location}, b"", head=head)
            return
        loaded = forum._load(self.path)
        if loaded is None:
            self._send(404, {"Content-Type": "text/plain; charset=utf-8"}, b"404 Not Found\n", head=head)
            return
        content = loaded.content
        if fault and fault.kind == "bad_utf8":
            content = content[:2] + b"\xff\xfe\xc3\x28 " + content[2:]
        headers = {
            "Content-Type": _content_type(self.path),
            "Vary": "Accept",
            "ETag": f'"{hashlib.sha256(content).hexdigest()[:20]}"',
            "Last-Modified": formatdate(int(loaded.modified), usegmt=True),
            **loaded.headers,
        }
        if loaded.status == 200 and forum.conditional and self._not_modified(headers["ETag"], loaded.modified):
            self._send_head(304, {name: headers[name] for name in ("ETag", "Last-Modified", "Vary")})
            return
        if fault and fault.kind == "drip":
            self._drip(loaded.status, headers, content, fault.rate, head)
        elif fault and fault.kind == "truncate":
            keep = len(content) // 2 if fault.keep is None else fault.keep
            self._send(loaded.status, {**headers, "Content-Length": str(len(content))}, content[:keep], head=head)
            self.close_connection = True
        else:
            self._send(loaded.status, headers, content, head=head)

    def _not_modified(self, etag: str, modified: float) -> bool:
        if_none_match = self.headers.get("If-None-Match")
        if if_none_match is not None:
            tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
            return "*" in tags or etag in tags
        if_modified_since = self.headers.get("If-Modified-Since")
        if if_modified_since:
            try:
                return int(modified) <= parsedate_to_datetime(if_modified_since).timestamp()
            except (TypeError, ValueError):
                return False
        return False

    def _drip(self, status: int, headers: dict[str, str], content: bytes, rate: int, head: bool) -> None:
        self._send_head(status, {"Content-Length": str(len(content)), **headers})
        if head:
            return
        step = max(1, rate // 10)
        stopping = self.forum._stopping

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(content), step):
                if stopping.wait(step / rate):
                    return
                yield content[start:start + step]

        self._stream(chunks())

    def _misbehave(self, fault: Fault, head: bool) -> None:
        kind = fault.kind
        if kind == "close":
            self.close_connection = True
            return
        if kind == "huge":
            self._huge(fault, head)
            return
        defaults = {
            "status": (500, "text/plain; charset=utf-8", None),
            "html": (200, "text/html; charset=utf-8", LOGIN_PAGE),
            "json_error": (403, "application/json; charset=utf-8", JSON_ERROR),
            "redirect": (301, "text/plain; charset=utf-8", ""),
        }
        status, content_type, default_body = defaults[kind]
        status = fault.status or status
        if default_body is None:
            default_body = f"{status} {HTTPStatus(status).phrase}\n"
        body = (default_body if fault.body is None else fault.body).encode()
        headers = {"Content-Type": content_type, **fault.headers}
        if kind == "redirect":
            headers["Location"] = fault.location or ""
        self._send(status, headers, body, head=head)

    def _huge(self, fault: Fault, head: bool) -> None:
        length = {"Content-Length": str(fault.size)} if fault.declare_length else {"Connection": "close"}
        self._send_head(fault.status or 200, {"Content-Type": MARKDOWN, **length})
        self.close_connection = not fault.declare_length
        if head:
            return
        block = b"# huge\n\n" + HUGE_LINE * (65536 // len(HUGE_LINE))

        def chunks() -> Iterator[bytes]:
            sent = 0
            while sent < fault.size:
                chunk = block[: fault.size - sent]
                sent += len(chunk)
                yield chunk

        self._stream(chunks())

    # cross-process control
    def _control(self) -> None:
        forum = self.forum
        route, _, query = self.path.partition("?")
        try:
            payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
            result: Any = None
            if (self.command, route) == ("GET", "/__stats"):
                result = forum.stats()
                params = {k: v[-1] for k, v in parse_qs(query).items()}
                if "path" in params:
                    result["count"] = forum.count(params["path"], prefix=params.get("prefix") == "1")
            elif (self.command, route) == ("GET", "/__requests"):
                result = [asdict(r) for r in forum.requests]
            elif (self.command, route) == ("POST", "/__reset"):
                forum.reset()
            elif (self.command, route) == ("POST", "/__clear"):
                forum.clear()
            elif (self.command, route) == ("POST", "/__fault"):
                arming = {k: payload.pop(k) for k in ("prefix", "times") if k in payload}
                path = payload.pop("path")
                forum.set_fault(path, Fault(**payload), **arming)
            elif (self.command, route) == ("POST", "/__body"):
                forum.set_body(payload.pop("path"), payload.pop("text"), **payload)
            else:
                self._send(404, {"Content-Type": "text/plain"}, b"no such control route\n")
                return
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            self._send(400, {"Content-Type": "text/plain"}, f"bad control request: {error!r}\n".encode())
            return
        body = json.dumps(result).encode()
        self._send(200, {"Content-Type": "application/json"}, body)


class RemoteForum(_Controls):
    """The same control API for a FakeForum running in another process."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, timeout=10)

    def _post(self, route: str, payload: Any = None) -> Any:
        response = self._client.post(route, json=payload)
        response.raise_for_status()
        return response.json()

    @property
    def requests(self) -> list[Request]:
        response = self._client.get("/__requests")
        response.raise_for_status()
        return [Request(**r) for r in response.json()]

    def count(self, path: str | None = None, *, prefix: bool = False) -> int:
        if path is None:
            return self.stats()["total"]
        params = {"path": path, "prefix": "1" if prefix else "0"}
        return self._client.get("/__stats", params=params).raise_for_status().json()["count"]

    def stats(self) -> dict[str, Any]:
        return self._client.get("/__stats").raise_for_status().json()

    def reset(self) -> None:
        self._post("/__reset")

    def clear(self) -> None:
        self._post("/__clear")

    def set_fault(self, path: str, fault: Fault, *, prefix: bool = False, times: int | None = None) -> None:
        self._post("/__fault", {"path": path, "prefix": prefix, "times": times, **asdict(fault)})

    def set_body(self, path: str, text: str, *, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self._post("/__body", {"path": path, "text": text, "status": status, "headers": headers or {}})

    def close_client(self) -> None:
        self._client.close()


@dataclass
class ForumProcess:
    """A `python -m tests.upstream` child process; stop() (or leaving the `with`) kills it."""

    process: subprocess.Popen
    url: str
    control: RemoteForum

    def stop(self) -> None:
        self.control.close_client()
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> ForumProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn(*options: str, port: int = 0, root: Path | str | None = None) -> ForumProcess:
    """Start the server as its own process and wait until it has printed its URL (it is then listening)."""
    command = [sys.executable, "-m", "tests.upstream", "--port", str(port), *options]
    if root is not None:
        command += ["--root", str(root)]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)  # clients hanging up mid-body are not news
    line = process.stdout.readline().strip() if process.stdout else ""
    if not line.startswith("http://"):
        process.kill()
        raise RuntimeError(f"fake forum process did not start (exit {process.wait()}): {line!r}")
    return ForumProcess(process, line, RemoteForum(line))


@pytest.fixture
def upstream() -> Iterator[FakeForum]:
    """A fresh fake forum per test: no faults, empty request log."""
    with FakeForum() as forum:
        yield forum


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--root", default=str(DEFAULT_ROOT))
    parser.add_argument("--no-rewrite", action="store_true", help="serve the saved origins unchanged")
    parser.add_argument("--no-conditional", action="store_true", help="never answer 304")
    args = parser.parse_args(argv)
    forum = FakeForum(args.root, host=args.host, port=args.port,
                      rewrite=() if args.no_rewrite else REWRITTEN_ORIGINS, conditional=not args.no_conditional)
    print(forum.url, flush=True)
    try:
        forum._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        forum._httpd.server_close()


if __name__ == "__main__":
    main()
