"""`feedbridge build --config feeds.toml`: write a folder of feed files for a static host (cron, CI).

The run reuses the web service whole: one `FeedService` over a fresh `MemoryStore`, so each upstream
page is fetched at most once per run and shared by every feed and format that lists it (single-flight
when two ask at once), at a `Pace` (the gate's) that keeps the run gentle with every forum.

Files are replaced atomically and only when their bytes change, so a static host's ETags hold and
readers get 304s. A feed that fails leaves its old files in place, as does one built without some of what
the forum failed to give (a topic page, its icon: the web service serves that, but here a worse file never
replaces a better one); the run finishes the other feeds, says what failed and exits 1. Exit 2 means the
config is wrong, and nothing was fetched. A saved list's feed is read by a service of its own, over its file.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import click

from feedbridge.errors import BuildConfigError, NoForumAnswer
from feedbridge.feeds.admission.gate import Pace
from feedbridge.feeds.request.spec import FeedSpec
from feedbridge.feeds.service import FeedService, build_service
from feedbridge.feeds.sources.dialects import detection_urls
from feedbridge.render.documents import FEED_DATE_BYTES, feed_date
from feedbridge.staticsite.atomic import is_file_inside, read_inside, remove_leftovers, write_all_inside, write_inside
from feedbridge.staticsite.files import Listed, feeds_opml, index_html
from feedbridge.staticsite.plan import (
    BuildConfig,
    FeedPlan,
    load_build_config,
)
from feedbridge.staticsite.progress import FeedOutcome, Progress
from feedbridge.store.memory import MemoryStore
from feedbridge.upstream.batch import BatchFetcher, SavedList


class _Degraded(Exception):
    """A feed built without some of what the forum failed to give, where its file is kept instead."""


INTERRUPTED = 130
"""The exit status of a build stopped by SIGINT: 128 + the signal's number, as a shell gives it."""
MAX_PARALLEL_FEEDS = 8  # feeds built at once; upstream requests are bounded per forum by the fetcher


@dataclass(slots=True)
class BuildReport:
    out_dir: Path
    feeds: list[FeedOutcome]
    site: list[tuple[str, str]]  # (index.html / feeds.opml, written|unchanged|failed)
    requests: int
    ms: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(f.status != "failed" for f in self.feeds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "out_dir": str(self.out_dir), "ms": round(self.ms, 1), "requests": self.requests,
            "feeds": [f.to_dict() for f in self.feeds],
            "site": [{"path": path, "status": status} for path, status in self.site],
            "error": self.error,
        }


def run_config(config: Path, out_dir: Path | None = None, quiet: bool = False, as_json: bool = False) -> int:
    """The CLI entry: 0 all feeds built, 1 some failed (their old files kept), 2 config error, 130 interrupted."""
    try:
        build_config = load_build_config(config, out_dir)
    except BuildConfigError as exc:
        where = f"{config}:{exc.line}" if exc.line else str(config)
        click.echo(f"{where}: {exc.message}", err=True)
        return 2
    # `--quiet` prints only failures, which the progress lines say: the service's warnings of what a feed went
    # without (a topic page gone, its excerpt kept) reached stderr through logging's last resort, three lines a
    # topic at every run of a cron job that mails whatever it prints, the run a success.
    logger = logging.getLogger("feedbridge")
    level = logger.level
    if quiet:
        logger.setLevel(logging.ERROR)
    try:
        report = build(build_config, Progress.for_stderr([f.name for f in build_config.feeds], quiet=quiet or as_json))
    except KeyboardInterrupt:
        # Ctrl-C, or a CI job cancelled (SIGINT first): 130, as a shell reports it, never 1 ("published, some feed
        # kept its old files"); at once, not after the requests under way, whose threads the exit would wait for.
        # Every file written is whole (atomic); the others are as they were; a leftover goes at the next build.
        click.echo("feedbridge: interrupted; the files written are whole, the others as they were", err=True)
        sys.stderr.flush()
        os._exit(INTERRUPTED)
    finally:
        logger.setLevel(level)
    if as_json:
        click.echo(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
    return 0 if report.ok else 1


def build(config: BuildConfig, progress: Progress) -> BuildReport:
    started = time.perf_counter()
    # A build killed mid-write left its temporary files; a static host would publish them for good.
    for leftover in remove_leftovers(config.out_dir):
        progress.note(f"removed {leftover}, left by an interrupted build")
    fetcher = BatchFetcher(config.settings, unjudged=detection_urls(
        config.settings.forums, (spec for plan in config.feeds for spec in plan.specs)))
    pace = Pace(config.concurrency, config.delay, config.max_wait,
                on_wait=lambda forum, seconds: progress.waiting(forum.key, seconds))
    service = build_service(config.settings, MemoryStore(config.settings.cache_max_bytes), fetcher, pace=pace)
    pool = ThreadPoolExecutor(min(MAX_PARALLEL_FEEDS, len(config.feeds)), thread_name_prefix="feed")
    try:
        outcomes = list(pool.map(lambda plan: _build_feed(config, service, fetcher, plan, progress), config.feeds))
    finally:  # nothing is left under way once every outcome is in; interrupted, nothing is waited for (`run_config`)
        pool.shutdown(wait=False, cancel_futures=True)
        service.close()
    site, error = _write_site(config, progress)
    report = BuildReport(config.out_dir, outcomes, site, fetcher.requests, (time.perf_counter() - started) * 1000,
                         error)
    counts = {status: sum(o.status == status for o in outcomes) for status in ("written", "unchanged", "failed")}
    progress.note(f"{len(outcomes)} feeds in {report.ms / 1000:.1f} s: "
                  + ", ".join(f"{n} {status}" for status, n in counts.items())
                  + f"; {report.requests} upstream requests; output in {config.out_dir}",
                  failed=not report.ok)
    return report


def _written_date(config: BuildConfig, spec: FeedSpec, file: str) -> tuple[str, float] | None:
    """The id and date of the Atom file written before (`render.documents.feed_date`): a rebuild of the same feed is
    dated no earlier."""
    written = read_inside(config.out_dir, file, FEED_DATE_BYTES) if spec.fmt == "atom" else None
    return None if written is None else feed_date(written)


def _build_feed(config: BuildConfig, service: FeedService, fetcher: BatchFetcher, plan: FeedPlan,
                progress: Progress) -> FeedOutcome:
    progress.started(plan.name)
    started = time.perf_counter()
    outcome = FeedOutcome(plan.name, "failed", "-", 0)
    # A saved list's feed is read by a service of its own, over its file alone: the run's page cache and fetcher
    # served one source file's list to every feed of the same URL, another's copy or a live one.
    own = None if plan.saved_list is None else build_service(
        config.settings, MemoryStore(config.settings.cache_max_bytes), SavedList(config.settings,
                                                                                 local_pages=plan.local_pages))
    try:
        with fetcher.counting() as tally:
            # no basic info read for a saved list
            bodies = [(own or service).scope(plan.signed).document(spec, urljoin(config.site_url, quote(file)),
                                                                   identity=own is None,
                                                                   written=_written_date(config, spec, file))
                      for spec, file in zip(plan.specs, plan.files, strict=False)]
        outcome.requests = tally.requests
        outcome.fetch = "file" if plan.saved_list else "fetched" if outcome.requests else "cached"
        if tally.failures and any(is_file_inside(config.out_dir, file) for file in plan.files):
            # Built without what the forum failed to give (a topic page's post, the forum's icon): a worse file
            # than the one it would replace, which is kept, as a failed feed's are.
            raise _Degraded(f"the forum failed {tally.failures} of its requests ({tally.first_failure}); "
                           "the feed built without them would replace a better one, which is kept")
        written = write_all_inside(config.out_dir, list(zip(plan.files, bodies, strict=False)))
    # Whatever goes wrong with one feed (upstream, disk, a bug) must not cost the other feeds theirs.
    except Exception as exc:
        outcome.error = exc.message if isinstance(exc, NoForumAnswer) else str(exc) if isinstance(exc, _Degraded) \
            else f"{type(exc).__name__}: {exc}"
        outcome.files = [(file, "kept" if is_file_inside(config.out_dir, file) else "missing") for file in plan.files]
    else:
        outcome.status = "written" if any(written) else "unchanged"
        outcome.files = [(file, "written" if w else "unchanged") for file, w in zip(plan.files, written, strict=False)]
    finally:
        if own is not None:
            own.close()
    outcome.ms = (time.perf_counter() - started) * 1000
    progress.feed_done(outcome)
    return outcome


def _write_site(config: BuildConfig, progress: Progress) -> tuple[list[tuple[str, str]], str | None]:
    """index.html and feeds.opml, listing every feed file that exists now (built now or kept from before)."""
    listed = []
    for plan in config.feeds:
        files = tuple((spec.fmt, file) for spec, file in zip(plan.specs, plan.files, strict=False)
                      if is_file_inside(config.out_dir, file))
        if files:
            listed.append(Listed(plan.name, plan.title, plan.html_url, files))
    results: list[tuple[str, str]] = []
    error = None
    for name, body in (("index.html", index_html(config.title, listed)),
                       ("feeds.opml", feeds_opml(config.title, config.site_url, listed))):
        try:
            results.append((name, "written" if write_inside(config.out_dir, name, body) else "unchanged"))
        except OSError as exc:
            results.append((name, "failed"))
            error = f"cannot write {name}: {exc.strerror or exc}"
            progress.note(error, failed=True)
    if not error:
        progress.note("site files: " + ", ".join(f"{name} {status}" for name, status in results))
    return results, error
