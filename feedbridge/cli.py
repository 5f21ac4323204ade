"""The `feedbridge` command: parse a list, build one feed, serve feeds over HTTP, or sign a private feed's URL.

Exit codes: 0 success, 1 fetch or parse failure, 2 usage error (click's own convention).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import click

from feedbridge import __version__
from feedbridge.config import Forum, Settings, parse_forum
from feedbridge.demo import FORUM as DEMO_FORUM
from feedbridge.demo import FORUM_NAME
from feedbridge.demo import NOTE as DEMO_NOTE
from feedbridge.errors import ConfigError, NoForumAnswer, NotAListError, RequestError, SavedFileError
from feedbridge.feeds.admission.gate import Pace
from feedbridge.feeds.request import params, signing
from feedbridge.feeds.request.spec import FeedSpec, parse_feed_request
from feedbridge.feeds.request.urls import FeedTarget, NoFeed, feed_for_url
from feedbridge.feeds.service import FeedService, build_service
from feedbridge.feeds.sources.dialects import JSON, MARKDOWN, detection_urls, lacks_of, source_of
from feedbridge.feeds.sources.reads import saved_pages
from feedbridge.models import Listing, listing_to_dict
from feedbridge.render.documents import FEED_DATE_BYTES, feed_date
from feedbridge.render.formats import FEED_FORMATS, render
from feedbridge.render.meta import Before, floored, listed
from feedbridge.staticsite.atomic import is_file_inside, read_inside, write_atomic
from feedbridge.staticsite.saved import read_saved
from feedbridge.store.memory import MemoryStore
from feedbridge.upstream.batch import BatchFetcher, SavedList
from feedbridge.upstream.fetcher import Fetcher

LOOPBACK = "127.0.0.1"
T = TypeVar("T")


class Failure(click.ClickException):
    """A fetch or parse failure: one line on stderr, exit status 1."""

    exit_code = 1


class Refused(click.ClickException):
    """A request that cannot be carried out as given: one line on stderr, exit status 2."""

    exit_code = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="feedbridge")
def main() -> None:
    """Atom, RSS and JSON Feed for Discourse forums."""


@main.command()
@click.argument("source")
@click.option("--base-url", help="Forum root for relative URLs (default: the list's own URL or SOURCE); "
                                 "a saved JSON list needs it.")
def parse(source: str, base_url: str | None) -> None:
    """Parse a topic list (Markdown or JSON: a file, '-' for stdin, or an http(s) URL) and print it as JSON."""
    if source.startswith(("http://", "https://")):
        forum = _url_forum(source, base_url)
        reader = JSON if forum.source == "json" else MARKDOWN
        with _service(_settings(forum)) as service:
            listing = _upstream(lambda: service.page(forum, source, source=reader))
    else:
        listing, _text = _read_saved(source, base_url)
    click.echo(json.dumps(listing_to_dict(listing), ensure_ascii=False, indent=2))


def _parameter_options(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with an option for each parameter of the table (`feeds/request/params.py`) the CLI takes: the
    feed parameter of its name (`--query` is the keyword filter: `q=`, or `keyword=` on a /filter feed), a
    whole number, a choice or a flag as the parameter's value is, repeatable where it is given many times.
    What it must be beyond that (bounds, names, tags) the table checks, as for a URL (exit 2, naming it)."""
    for param in reversed(OPTIONS):
        declared = [f"--{param.option_name}", *([param.short] if param.short else [])]
        help = param.help[0].upper() + param.help[1:] + (" (repeatable)." if param.many else ".")
        # Every option is read as repeatable, and one given once at most refuses a repeat (`_once`), as the web
        # refuses `?limit=1&limit=2`: click kept the last, and `--limit 1 --limit 2` was a feed of 2.
        once = None if param.many else _once
        if param.value == "flag":
            command = click.option(*declared, is_flag=True, multiple=True, callback=once, help=help)(command)
        elif param.value == "choice":
            command = click.option(*declared, type=click.Choice([v for v, _ in param.choices]), multiple=True,
                                   callback=once, help=help)(command)
        else:
            command = click.option(*declared, type=str,  # as typed: the table reads it, as a URL's (`1_0`, `٣`)
                                   multiple=True, callback=once, help=help)(command)
    return command


def _once(_ctx: click.Context, _param: click.Parameter, values: tuple[object, ...]) -> object:
    """The one value of an option given once at most, None when it is not given."""
    if len(values) > 1:
        raise click.BadParameter(f"given {len(values)} times; give it once")
    return values[0] if values else None


def _dest(param: params.Param) -> str:
    """The name click gives the value of `param`'s option."""
    return param.option_name.replace("-", "_")


OPTIONS = params.firsts((p for p in params.PARAMETERS if p.cli), _dest)
"""The table's rows with a CLI option, one per option (the first of those that share one: `--query` is `q=`,
and `keyword=` on /filter), in order."""
ROWS = {_dest(option): tuple(p for p in params.PARAMETERS if p.cli and _dest(p) == _dest(option)) for option in OPTIONS}
"""Each option's rows, by the name click gives its value, read once: what `_parameters` looks an option up in."""


@main.command()
@click.argument("source", required=False)
@click.option("--format", "fmt", type=click.Choice(FEED_FORMATS), default="atom", show_default=True)
@_parameter_options
@click.option("--base-url", help="Forum root for relative URLs; a saved JSON list needs it.")
@click.option("--self-url", help="The URL the feed will be published at (rel=self).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write here (atomically).")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
              help="Build every feed named in a TOML config file instead (see feeds.example.toml).")
@click.option("--out-dir", type=click.Path(file_okay=False), callback=lambda _ctx, _param, value: _folder(value),
              help="With --config: output folder.")
@click.option("--quiet", is_flag=True, help="With --config: print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="With --config: print a JSON summary.")
def build(source: str | None, fmt: str, base_url: str | None, self_url: str | None, output: Path | None,
          config: Path | None, out_dir: Path | None, quiet: bool, as_json: bool, **options: Any) -> None:
    """Build one feed from SOURCE (a Markdown or JSON list: file, '-', or URL), or many from --config.

    SOURCE names the feed as a feed path does on the server (`/c/compiler/5.md` is the compiler category's
    feed): a URL is read through the service, as the server reads it; a saved list (whose own URL, when it
    has one, names the list; else it is taken for `latest`) through the service too, the file standing in
    for that URL as a `source =` file does in a static build, and a parameter that needs what the file
    does not carry is refused by name (exit 2). The feed options are the feed URL's parameters.
    """
    _refuse_options_of_the_other_mode(click.get_current_context(), config is not None)
    if config is not None:
        from feedbridge.staticsite.build import run_config

        sys.exit(run_config(config, out_dir=out_dir, quiet=quiet, as_json=as_json))
    if source is None:
        raise click.UsageError("give a SOURCE (file, '-' or URL) or --config FILE")
    given = {name: value for name, value in options.items() if value is not None and value is not False and value != ()}
    # the id and date of the file written before (`feed_date`): the same feed's is not before it, and a list without
    # one is given it again (the same bytes)
    previous = read_inside(output.parent, output.name, FEED_DATE_BYTES) if output and fmt == "atom" else None
    written = None if previous is None else feed_date(previous)
    if source.startswith(("http://", "https://")):
        settings = _settings(_url_forum(source, base_url, by_suffix=False))
        spec = _spec(settings, source, fmt, given)
        kept = output is not None and is_file_inside(output.parent, output.name)
        with _service(settings, counted=spec if kept else None) as service, \
                BatchFetcher.counting() if kept else contextlib.nullcontext() as tally:
            body = _upstream(lambda: service.document(spec, self_url, written=written))
        if tally is not None and tally.failures:
            # as a static build keeps a feed's file (`staticsite.build`): built without what the forum failed to give
            raise Failure(f"the forum failed {tally.failures} of its requests ({tally.first_failure}); the feed built "
                          f"without them would replace a better one in {output}, which is kept")
    else:
        listing, text = _read_saved(source, base_url)
        moment = _written_at(source)  # saved again at each run, or stdin's now: a new date for the same empty list
        body = _saved_feed(listing, text, fmt, given, self_url, moment, written)
    if output is None:
        sys.stdout.buffer.write(body)
        return
    try:
        write_atomic(output, body)
    except (OSError, ValueError) as exc:  # a folder that is a file or cannot be made, a name with a NUL
        raise Failure(f"cannot write {output}: {getattr(exc, 'strerror', None) or exc}") from None


def _folder(value: str | None) -> Path | None:
    """`--out-dir`, never empty: an unset `$OUT` in a cron line wrote every feed into the current folder (the
    config's `out_dir = ""` is refused too)."""
    if value == "":
        raise click.BadParameter("is empty: name a folder", param_hint="--out-dir")
    return None if value is None else Path(value)


CONFIG_ONLY = ("out_dir", "quiet", "as_json")
"""`build`'s options that only `--config` takes; every other one but `--config` itself is one feed's."""


def _refuse_options_of_the_other_mode(ctx: click.Context, with_config: bool) -> None:
    """An option that does nothing in the mode chosen is a usage error naming it (exit 2), not ignored:
    `--config` builds what its file names, so one feed's SOURCE and options would silently not apply."""
    for param in ctx.command.params:
        if param.name in (None, "config") or ctx.get_parameter_source(param.name) in (
                None, click.core.ParameterSource.DEFAULT):
            continue
        if with_config != (param.name in CONFIG_ONLY):
            named = param.human_readable_name if isinstance(param, click.Argument) else \
                next(opt for opt in param.opts if opt.startswith("--"))
            raise click.UsageError(f"{named} is for one feed, not with --config" if with_config else
                                   f"{named} is for --config only")


@main.command()
@click.option("--host", default=LOOPBACK, show_default=True,
              help="Address to listen on: the default is this machine only; 0.0.0.0 is every interface.")
@click.option("--port", type=click.IntRange(0, 65535), show_default="$PORT or 8000",
              help="Port to listen on; 0 picks a free one.")
@click.option("--workers", type=click.IntRange(1, 64), help="Worker processes (default: $WEB_CONCURRENCY or 2).")
@click.option("--demo", is_flag=True,
              help=f"Serve a bundled offline copy of {FORUM_NAME}'s compiler category and make feeds of it.")
def serve(host: str, port: int | None, workers: int | None, demo: bool) -> None:
    """Run the web service under gunicorn, with the same settings as the Procfile (stop it with Ctrl-C)."""
    if demo and host != LOOPBACK:
        raise click.UsageError(f"--demo listens on {LOOPBACK} only; leave out --host")
    env = dict(os.environ)
    if demo:
        env["FEEDBRIDGE_FORUMS"] = DEMO_FORUM
    try:
        settings = Settings.from_env(env)  # fail fast, with the variable's name, before gunicorn forks workers
    except ConfigError as exc:
        raise Refused(str(exc)) from None
    listener = _listen(host, settings.port if port is None else port)
    if workers:
        env["WEB_CONCURRENCY"] = str(workers)
    # The socket is bound here and handed to gunicorn, so the address printed is the one that serves,
    # `--port 0` works, and a port in use is one clear line; --bind overrides the config's 0.0.0.0:$PORT.
    argv = [sys.executable, "-m", "gunicorn", "--config", "python:feedbridge.web.gunicorn_conf",
            "--bind", f"fd://{listener.fileno()}",
            "feedbridge.demo.wsgi:create_app()" if demo else "feedbridge.web.app:create_app()"]
    bridge = _url(host, listener.getsockname()[1])
    if demo:
        _say_demo(bridge)
    else:
        reach = "this machine only; --host 0.0.0.0 for every interface" if host == LOOPBACK else f"address {host}"
        click.echo(f"feedbridge on {bridge}/ (listening on {reach}); stop with Ctrl-C.")
    os.set_inheritable(listener.fileno(), True)
    os.execve(sys.executable, argv, env)


@main.command()
@click.argument("url")
def sign(url: str) -> None:
    """Print URL (a feed URL on this bridge, or its path) signed for a private forum: its parameters in
    canonical order and token= appended. Reads the service's environment (FEEDBRIDGE_FORUMS,
    FEEDBRIDGE_CREDENTIALS, FEEDBRIDGE_SECRET)."""
    try:
        click.echo(signing.sign_url(Settings.from_env(), url))
    except (ConfigError, RequestError) as exc:
        raise Refused(exc.message) from None


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


def _say_demo(bridge: str) -> None:
    """The demo's feed URLs are the ones a bridge on this port has for the real forum: the same every run."""
    click.echo(f"feedbridge demo: {FORUM_NAME} ({DEMO_NOTE}), its compiler category saved in the package, "
               f"listening on {LOOPBACK} only (this machine). Open:")
    for label, path in (("front page", ""), ("Atom feed", f"{FORUM_NAME}/c/compiler/5.atom"),
                        ("as a page", f"{FORUM_NAME}/c/compiler/5.html"), ("OPML", f"{FORUM_NAME}/opml")):
        click.echo(f"  {label:<11} {bridge}/{path}")
    click.echo("Nothing is read from the internet. Stop with Ctrl-C.")


def _read_saved(source: str, base_url: str | None) -> tuple[Listing, str]:
    """A list saved as a file or piped in (JSON when it starts with `{`, else Markdown), and its text:
    a feed of it is made by the service, which reads the list from the text as from the forum."""
    data = _read_bounded(source, Settings().max_body_bytes)
    is_json = data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{"
    if is_json and base_url is None:
        raise click.UsageError("a JSON list names no forum: give its root with --base-url")
    try:
        if is_json:
            listing = JSON.read_listing(data, base_url=base_url or "", source_url=None)
        else:
            listing = MARKDOWN.read_listing(data, base_url=base_url)
    except NotAListError as exc:
        raise Failure(f"{source}: {exc}") from None
    return listing, data.decode("utf-8")  # both readers refuse what is not UTF-8


def _read_bounded(source: str, limit: int) -> bytes:
    """The bytes of a saved list, a regular file (`staticsite.saved.read_saved`) or stdin, at most `limit`
    (FEEDBRIDGE_MAX_BODY_BYTES' default, the most a list read from the forum may be): `/dev/zero` or a FIFO
    read whole would take every byte of memory or wait forever."""
    if source != "-":
        try:
            return read_saved(source, limit)
        except SavedFileError as exc:
            raise Failure(exc.message) from None
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise Failure(f"cannot read -: larger than {limit} bytes, the most a forum's page may be "
                      "(FEEDBRIDGE_MAX_BODY_BYTES)")
    return data


def _saved_feed(listing: Listing, text: str, fmt: str, options: Mapping[str, object], self_url: str | None,
                updated: datetime, written: Before | None = None) -> bytes:
    """The feed of a saved list, made by the service as the static build makes one from a source file.

    What the list does not carry (a Markdown list has no likes, views, tags or category ids; no list has
    the categories directory that names a category's subcategories) is a usage error naming the
    parameter, never a feed filtered on nothing. The settings are the defaults, not the environment's,
    as the static build's are. `updated` stands in for the build time as the feed's date when no topic
    has one, so a saved list gives the same bytes on every run, and as the moment no later date is the feed's
    own (`render.meta.newest_believed`): the list was read from the forum by then. `written`: the file this feed
    replaces, whose date its own is not before and a list with no date of its own takes (`render.meta.floored`)."""
    source = source_of(listing)
    settings = Settings(forums=(_forum(listing.base_url, source.name),))
    if naming := next((p for p in OPTIONS if p.lists and _dest(p) in options), None):
        raise click.UsageError(f"--{naming.option_name} names the forum list that is read; a saved list is the list "
                               "its own URL names: build from the list's URL")
    spec = _spec(settings, listing.url, fmt, options)
    if spec.pages != 1 or spec.content != "excerpt":
        asked = f"--pages {spec.pages} reads further pages" if spec.pages != 1 else "--content full reads topic pages"
        raise click.UsageError(f"a saved list is one page of excerpts: {asked} of the forum, which it does not "
                               "carry: build from the list's URL")
    if lacking := spec.filter.json_needed(lacks_of(listing)):
        raise click.UsageError(f"{lacking} needs what a saved Markdown list does not carry (likes, views, tags, "
                               "category ids): build from a saved JSON list, or from the list's URL")
    if spec.filter.exclude_categories:
        raise click.UsageError("exclude_category needs the forum's categories directory to drop subcategories too, "
                               "which a saved list does not carry: build from the list's URL")
    service = build_service(settings, MemoryStore(settings.cache_max_bytes),
                          SavedList(settings, local_pages=saved_pages(spec, text, source)))
    try:
        first, entries = _upstream(lambda: service.entries(spec))
    finally:
        service.close()
    # the saved file's time where the list has a date of its own; else the date of the file written before
    return render(spec.fmt, floored(spec.head(first, self_url, None, updated, built=updated),
                                    updated if listed(first, updated) else None, written), entries)


def _spec(settings: Settings, list_url: str | None, fmt: str, options: Mapping[str, object]) -> FeedSpec:
    """The spec of the feed a forum URL names on the one forum of `settings`, as the front page's paste box
    reads it (`feeds.request.urls`): `{base}/c/x/5.md` is the feed `c/x/5`, `{base}/t/slug/7` the topic's posts,
    `{base}/u/x/activity` the user's posts, with the list's own query (`period=`, `category=`, `q=`, not
    `page=`), and `options` (the parameter options given) as the feed's parameters. A list without a URL is
    its forum's latest list."""
    forum = settings.forums[0]
    found = feed_for_url(settings, list_url) if list_url else None
    if isinstance(found, NoFeed):
        # the forum was taken from the URL's host: one in a subfolder is named by --base-url, which nothing else says
        first = urlsplit(list_url or "").path.strip("/").partition("/")[0][:40]
        hint = (f" A forum in a subfolder ({forum.base_url}/{first}) is named with --base-url."
                if first and "/" not in forum.key and first not in _CORE_FIRST else "")
        raise click.BadParameter(found.message + hint)
    if found and list_url:
        _refuse_unread(list_url, found)
    path, listed, feed = found.request(fmt) if found else (f"{forum.key}/latest.{fmt}", {}, "latest")
    given = _parameters(feed, options)
    # The web refuses a parameter given twice; the URL's own default (`/top` is every period) is no value given.
    if twice := next((name for name in given if listed.get(name, [params.NAMED[name].default]) !=
                      [params.NAMED[name].default]), None):
        raise click.BadParameter(f"the URL gives {twice}={','.join(listed[twice])} already: give it in the URL or "
                                 "as the option, not both", param_hint=_option_of(twice, options))
    try:
        return parse_feed_request(settings, path, {**listed, **given})
    except RequestError as exc:
        raise click.BadParameter(exc.message, param_hint=_option_of(exc.param, options)) from None


def _refuse_unread(url: str, target: FeedTarget) -> None:
    """A bridge parameter in SOURCE's query that the feed it names does not read: `?period=montly`, a
    `category=` that is no number, `?min_likes=5` on a forum list. The paste box reads such a URL as the forum
    would and says what feed it made; a build printed that other feed (a top list of every period, the whole
    forum's latest, an unfiltered one) and exit 0. The forum's own (`page=`, `order=`) are ignored, as there."""
    read = set(target.params)
    for key, values in parse_qs(urlsplit(url).query).items():
        param = params.NAMED.get(key)
        unread = next((v for v in values if (key, v.strip()) not in read), None) if param else None
        if param is None or unread is None:
            continue
        if param.lists:
            how = {"period": f"a top list's period is one of {', '.join(params.TOP_PERIODS)}",
                   "category": "category= is a category's number, on the latest list, a user's or /posts"}.get(
                       key, f"the forum's {key}= is read on its /search and /filter pages only (the bridge's "
                            "keyword query is --query)")
        else:
            how = f"the feed's {key}= is given as --{param.option_name}, not in the forum's URL"
        raise click.BadParameter(f"{key}={unread[:40]} is not read by the feed the URL names: {how}",
                                 param_hint="SOURCE")


_CORE_FIRST = frozenset({"c", "t", "u", "tag", "tags", "top", "latest", "hot", "posts", "search", "filter", "topics",
                         "categories", "new", "unread"})
"""The first part of Discourse's own paths (config/routes.rb), which no subfolder forum is named by."""


def _option_of(name: str | None, options: Mapping[str, object]) -> str | None:
    """The option given for the feed parameter `name` (`--author` for `author=`), to name it in an error;
    None for one the list's own URL carries."""
    option = next((p.option_name for p in params.PARAMETERS if p.cli and p.name == name and _dest(p) in options),
                  None)
    return None if option is None else f"--{option}"


def _parameters(feed: params.FeedKind, options: Mapping[str, object]) -> dict[str, list[str]]:
    """The feed parameters of the options given, for a feed of kind `feed`: each option's row that the feed
    takes names its parameter (`--query` is `keyword=` on /filter), else its first row (which the feed then
    refuses by name)."""
    found: dict[str, list[str]] = {}
    for dest, value in options.items():
        rows = ROWS[dest]
        param = next((p for p in rows if feed in p.feeds), rows[0])
        values = value if isinstance(value, tuple) else (value,)
        found[param.name] = ["1" if v is True else str(v) for v in values]
    return found


def _url_forum(url: str, base_url: str | None, by_suffix: bool = True) -> Forum:
    """The forum a list URL is on, read through the source its suffix names (`parse`, which reads that page) or,
    `by_suffix` False, the one detected, as the service does (`build`: `…/c/compiler/5.md` names the category's
    feed, and its `.md` said nothing of a forum whose Markdown is off, which it read as missing or private)."""
    parts = urlsplit(url)
    source = next((name for name, suffix in (("markdown", ".md"), ("json", ".json"))
                   if by_suffix and parts.path.endswith(suffix)), "auto")
    return _forum(base_url or f"{parts.scheme}://{parts.netloc}", source, "--base-url" if base_url else "SOURCE")


def _forum(base_url: str, source: str | None = None, given: str | None = None) -> Forum:
    """The forum at `base_url`; a usage error naming what gave it (`given`: an option, the SOURCE), never the
    setting the service reads forums from, which a CLI run does not."""
    try:
        return parse_forum(base_url, source)
    except ConfigError as exc:
        raise click.BadParameter(exc.detail, param_hint=given) from None


def _settings(forum: Forum) -> Settings:
    """The environment's settings (timeouts, limits, defaults) for `forum` alone, as a static build reads them
    (`Settings.for_run`): a run in the web service's environment is not stopped by what only the web reads."""
    try:
        return Settings.from_env(web=False).for_run((forum,))
    except ConfigError as exc:  # the user's to fix, as a bad option is (exit 2, as `sign` and `serve` say it)
        raise Refused(str(exc)) from None


@contextlib.contextmanager
def _service(settings: Settings, counted: FeedSpec | None = None) -> Iterator[FeedService]:
    """A service of its own, over an empty memory store: one run reads the forum as one server request does, at a
    batch run's pace (`Pace`: two requests at a time, a short Retry-After sat out). `counted`: the feed whose
    failures the forum's are counted as (`BatchFetcher.counting`; what detecting its source reads leaves it none
    the worse: `detection_urls`), for a run with a file to keep."""
    fetcher = Fetcher(settings) if counted is None else BatchFetcher(settings, unjudged=detection_urls(
        settings.forums, (counted,)))
    service = build_service(settings, MemoryStore(settings.cache_max_bytes), fetcher, pace=Pace(delay=0.0,
                            on_wait=lambda forum, seconds: click.echo(f"{forum.key} asked to wait {seconds:.0f}s; "
                                                                      "waiting", err=True)))
    try:
        yield service
    finally:
        service.close()


def _upstream(read: Callable[[], T]) -> T:
    try:
        return read()
    except NoForumAnswer as exc:
        raise Failure(exc.message) from None


def _written_at(source: str) -> datetime:
    """When the saved list was last written (the same date on every run), or now for stdin: the feed's date
    when no topic carries one."""
    moment = time.time()
    if source != "-":
        with contextlib.suppress(OSError):  # _read_saved has read it; only a race could make this fail
            moment = Path(source).stat().st_mtime
    return datetime.fromtimestamp(int(moment), UTC)
