"""The `feedbridge` command: parse a list, build one feed, or serve feeds over HTTP.

Exit codes: 0 success, 1 fetch or parse failure, 2 usage error (click's own convention).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import click

from feedbridge import __version__
from feedbridge.config import Settings, parse_forum
from feedbridge.demo import FORUM_NAME, DemoForum
from feedbridge.discourse.listing import parse_listing
from feedbridge.errors import ConfigError, NotAListError, RequestError, UpstreamError
from feedbridge.feeds.filters import make_filter
from feedbridge.models import Listing, listing_to_dict
from feedbridge.render.feeds import FeedMeta
from feedbridge.render.formats import FEED_FORMATS, render
from feedbridge.staticsite.atomic import write_atomic
from feedbridge.upstream.fetcher import Fetcher

LOOPBACK = "127.0.0.1"


class Failure(click.ClickException):
    """A fetch or parse failure: one line on stderr, exit status 1."""

    exit_code = 1


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="feedbridge")
def main() -> None:
    """Atom, RSS and JSON Feed for Discourse forums."""


@main.command()
@click.argument("source")
@click.option("--base-url", help="Forum root for relative URLs (default: the list's own URL or SOURCE).")
def parse(source: str, base_url: str | None) -> None:
    """Parse a topic list (file, '-' for stdin, or an http(s) URL of a .md list) and print it as JSON."""
    listing = _load(source, base_url)
    click.echo(json.dumps(listing_to_dict(listing), ensure_ascii=False, indent=2))


@main.command()
@click.argument("source", required=False)
@click.option("--format", "fmt", type=click.Choice(FEED_FORMATS), default="atom", show_default=True)
@click.option("--author", "authors", multiple=True, help="Keep topics started by this user (repeatable).")
@click.option("--query", "-q", help='Keyword query: words, "phrases", -exclusions, OR.')
@click.option("--limit", type=int, help="At most this many entries.")
@click.option("--base-url", help="Forum root for relative URLs.")
@click.option("--self-url", help="The URL the feed will be published at (rel=self).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here (atomically).")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
              help="Build every feed named in a TOML config file instead (see feeds.example.toml).")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), help="With --config: output folder.")
@click.option("--quiet", is_flag=True, help="With --config: print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="With --config: print a JSON summary.")
def build(source: str | None, fmt: str, authors: tuple[str, ...], query: str | None, limit: int | None,
          base_url: str | None, self_url: str | None, output: Path | None, config: Path | None,
          out_dir: Path | None, quiet: bool, as_json: bool) -> None:
    """Build one feed from SOURCE (file, '-', or URL), or many from --config."""
    if config is not None:
        from feedbridge.staticsite.build import run_config

        sys.exit(run_config(config, out_dir=out_dir, quiet=quiet, as_json=as_json))
    if source is None:
        raise click.UsageError("give a SOURCE (file, '-' or URL) or --config FILE")
    try:
        feed_filter = make_filter(authors=authors, query=query, limit=limit)
    except RequestError as exc:
        raise click.BadParameter(exc.message) from None
    listing = _load(source, base_url)
    described = feed_filter.describe()
    title = f"{urlsplit(listing.base_url).netloc} · {listing.title}" + (f" · {described}" if described else "")
    html_url = (listing.url or listing.base_url).removesuffix(".md").replace(".md?", "?")
    # The filter as a query in the id's fragment, named like the service's parameters: a valid IRI (no
    # spaces), and the same id for the same list and filter on every run. The limit does not name the feed.
    named = [("author", a) for a in sorted(feed_filter.authors)]
    named += [("q", str(feed_filter.query))] if feed_filter.query is not None else []
    meta = FeedMeta(title=title, forum_url=listing.base_url, html_url=html_url,
                    feed_id=self_url or (listing.url or listing.base_url) + (f"#{urlencode(named)}" if named else ""),
                    self_url=self_url, updated=_read_at(source))
    body = render(fmt, meta, feed_filter.apply(listing.topics))
    if output is None:
        sys.stdout.buffer.write(body)
    else:
        write_atomic(output, body)


@main.command()
@click.option("--host", default=LOOPBACK, show_default=True,
              help="Address to listen on: the default is this machine only; 0.0.0.0 is every interface.")
@click.option("--port", type=click.IntRange(0, 65535), default=lambda: int(os.environ.get("PORT", "8000")),
              show_default="$PORT or 8000", help="Port to listen on; 0 picks a free one.")
@click.option("--workers", type=click.IntRange(1, 64), help="Worker processes (default: $WEB_CONCURRENCY or 2).")
@click.option("--demo", is_flag=True,
              help=f"Serve a bundled offline copy of {FORUM_NAME}'s compiler category and make feeds of it.")
def serve(host: str, port: int, workers: int | None, demo: bool) -> None:
    """Run the web service under gunicorn, with the same settings as the Procfile (stop it with Ctrl-C)."""
    if demo and host != LOOPBACK:
        raise click.UsageError(f"--demo listens on {LOOPBACK} only; leave out --host")
    env = dict(os.environ)
    forum = DemoForum() if demo else None
    if forum is not None:
        env["FEEDBRIDGE_FORUMS"] = forum.base_url
    try:
        Settings.from_env(env)  # fail fast, with the variable's name, before gunicorn forks workers
    except ConfigError as exc:
        raise Failure(str(exc)) from None
    listener = _listen(host, port)
    if workers:
        env["WEB_CONCURRENCY"] = str(workers)
    # The socket is bound here and handed to gunicorn, so the address printed is the one that serves,
    # `--port 0` works, and a port in use is one clear line; --bind overrides the config's 0.0.0.0:$PORT.
    argv = [sys.executable, "-m", "gunicorn", "--config", "python:feedbridge.web.gunicorn_conf",
            "--bind", f"fd://{listener.fileno()}", "feedbridge.web.app:create_app()"]
    bridge = _url(host, listener.getsockname()[1])
    if forum is None:
        reach = "this machine only; --host 0.0.0.0 for every interface" if host == LOOPBACK else f"address {host}"
        click.echo(f"feedbridge on {bridge}/ (listening on {reach}); stop with Ctrl-C.")
        os.set_inheritable(listener.fileno(), True)
        os.execve(sys.executable, argv, env)
    with forum:
        sys.exit(_run_demo(forum, bridge, argv, env, listener))



def _listen(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as exc:
        hint = "; choose another with --port" if exc.errno == errno.EADDRINUSE else ""
        raise Failure(f"cannot listen on {host} port {port}: {exc.strerror}{hint}") from None
    return listener


def _url(host: str, port: int) -> str:
    shown = LOOPBACK if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _run_demo(forum: DemoForum, bridge: str, argv: list[str], env: dict[str, str], listener: socket.socket) -> int:
    """gunicorn as a child, so this process keeps serving the demo forum; Ctrl-C or SIGTERM stop both."""
    key = forum.base_url.removeprefix("http://")
    click.echo(f"feedbridge demo: an offline copy of {FORUM_NAME}'s compiler category, listening on {LOOPBACK} "
               "only (this machine). Open:")
    for label, path in (("front page", ""), ("Atom feed", f"{key}/c/compiler/5.atom"),
                        ("as a page", f"{key}/c/compiler/5.html"), ("OPML", f"{key}/opml")):
        click.echo(f"  {label:<11} {bridge}/{path}")
    click.echo(f"The forum itself is served at {forum.base_url}/latest.md. Stop with Ctrl-C.")
    child = subprocess.Popen(argv, env=env, pass_fds=(listener.fileno(),))
    listener.close()
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:  # the terminal sent SIGINT to gunicorn too: wait for it to finish
            continue


def _load(source: str, base_url: str | None) -> Listing:
    try:
        if source == "-":
            return parse_listing(sys.stdin.buffer.read(), base_url=base_url)
        if source.startswith(("http://", "https://")):
            return _fetch(source, base_url)
        try:
            text = Path(source).read_bytes()
        except OSError as exc:
            raise Failure(f"cannot read {source}: {exc.strerror}") from None
        return parse_listing(text, base_url=base_url)
    except NotAListError as exc:
        raise Failure(f"{source}: {exc}") from None


def _read_at(source: str) -> datetime:
    """When SOURCE was last written (a file; the same date on every run), else now (stdin or a URL, read
    just now): the feed's date when no topic carries one."""
    moment = time.time()
    if source != "-" and not source.startswith(("http://", "https://")):
        with contextlib.suppress(OSError):  # _load has read it; only a race could make this fail
            moment = Path(source).stat().st_mtime
    return datetime.fromtimestamp(int(moment), UTC)


def _fetch(url: str, base_url: str | None) -> Listing:
    forum = parse_forum(base_url or f"{urlsplit(url).scheme}://{urlsplit(url).netloc}")
    fetcher = Fetcher(Settings.from_env())
    try:
        fetched = fetcher.get(forum, url)
    except UpstreamError as exc:
        raise Failure(exc.message) from None
    finally:
        fetcher.close()
    return parse_listing(fetched.text, base_url=base_url, source_url=fetched.url)
