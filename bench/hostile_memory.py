"""Hostile content through one gunicorn worker: its RSS against the cache's bound, and its CPU for nested posts.

Issue 23, findings 8 and 9. Each of twelve forums (subfolders of one fake forum) serves a 4.8 MB JSON list
page of 190,000 minimal topics and a 4.2 MB categories directory of 500 categories with 8,000-character
names; one feed of each fills the cache with its page, its directory and its feed. The bound claimed is
the worker's RSS before them + 2 × FEEDBRIDGE_CACHE_MAX_BYTES + 64 MiB (the cache's bound counted by what
entries really hold, allocator slack, a parse's transient objects). Then a `content=full` feed over three
posts of 30,000 nested `<ul><li>` (240 KB each), whose parsing in nh3 took 15 s of CPU before the pre-scan.

`python -m bench.hostile_memory [--quick]` runs it alone; `python -m bench --only hostile` in the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

from .harness import Context, Row, table
from .procs import Procs, cpu_seconds, rss_bytes, worker_pids

MIB = 2**20
CACHE_BYTES = 32 * MIB
SLACK_BYTES = 64 * MIB
NESTED = "<ul><li>" * 30_000 + "deep"


def hostile_page(count: int) -> str:
    """`count` minimal topics, the first hundred in category 7 (so the feed looks the directory up)."""
    extra = ',"category_id":7'
    return '{"topic_list":{"topics":[' + ",".join(
        f'{{"id":{i},"title":"t"{extra if i <= 100 else ""}}}' for i in range(1, count + 1)) + "]}}"


def hostile_directory(count: int, name_chars: int) -> str:
    return json.dumps({"category_list": {"categories": [
        {"id": i, "slug": f"c{i}", "name": f"{i}" + "n" * name_chars, "description_text": "d" * 400}
        for i in range(1, count + 1)]}})


def _nested_forum() -> tuple[str, dict[str, str]]:
    ids = (101, 102, 103)
    listing = json.dumps({"topic_list": {"topics": [
        {"id": i, "title": f"topic {i}", "slug": "deep", "posts_count": 1,
         "last_posted_at": f"2026-05-0{i - 100}T10:00:00Z"} for i in ids]}})
    bodies = {"/nested/latest.json": listing}
    for i in ids:
        bodies[f"/nested/t/deep/{i}.json"] = json.dumps({
            "id": i, "title": f"topic {i}", "post_stream": {"posts": [{"post_number": 1, "cooked": NESTED}]}})
    return "/nested", bodies


def hostile_section(ctx: Context) -> list[Row]:
    forums, topics = ctx.loops(12, 2), ctx.loops(190_000, 20_000)
    page, directory = hostile_page(topics), hostile_directory(500, ctx.loops(8000, 800))
    nested_path, nested_bodies = _nested_forum()
    with Procs(ctx.workdir) as procs:
        forum = procs.forum()
        for i in range(forums):
            forum.control.set_body(f"/f{i}/latest.json", page)
            forum.control.set_body(f"/f{i}/categories.json", directory)
        for path, text in nested_bodies.items():
            forum.control.set_body(path, text)
        bases = [f"{forum.url}/f{i}" for i in range(forums)] + [forum.url + nested_path]
        app, master = procs.gunicorn("feedbridge-hostile", {
            "FEEDBRIDGE_FORUMS": " ".join(f"json:{base}" for base in bases), "WEB_CONCURRENCY": "1",
            "FEEDBRIDGE_CACHE_MAX_BYTES": str(CACHE_BYTES),
        })
        (worker,) = worker_pids(master.pid)
        host = forum.url.removeprefix("http://")
        httpx.get(f"{app}/{host}/f0/latest.atom?limit=1", timeout=120).raise_for_status()  # imports, first parse
        before = rss_bytes(worker)
        sizes = []
        for i in range(forums):
            sizes.append(len(httpx.get(f"{app}/{host}/f{i}/latest.atom", timeout=120).raise_for_status().content))
        after = rss_bytes(worker)
        cpu_before, start = cpu_seconds(worker), time.monotonic()
        nested = httpx.get(f"{app}/{host}{nested_path}/latest.atom?content=full", timeout=120).raise_for_status()
        elapsed = time.monotonic() - start
        time.sleep(1.0)  # pool threads still at work after the answer count too
        cpu = cpu_seconds(worker) - cpu_before
    bound = before + 2 * CACHE_BYTES + SLACK_BYTES
    ctx.notes.append(
        f"23.9: one gunicorn worker, FEEDBRIDGE_CACHE_MAX_BYTES={CACHE_BYTES // MIB} MiB; {forums} forums, each a "
        f"{len(page) / 1e6:.1f} MB JSON list of {topics:,} minimal topics and a {len(directory) / 1e6:.1f} MB "
        f"directory; feeds of {max(sizes) / 1024:.0f} KiB at most (1,000 topics a page). 23.8: three cooked posts "
        f"of 30,000 nested <ul><li>, answered in {elapsed:.2f} s ({len(nested.content)} bytes).")
    return [
        Row("23.9", f"worker RSS after {forums} hostile list pages and directories (baseline: before them)",
            after / MIB, before / MIB, "MiB", None,
            f"≤ before + 2 × {CACHE_BYTES // MIB} + {SLACK_BYTES // MIB} MiB = {bound / MIB:.0f} MiB", after <= bound),
        Row("23.8", "worker CPU for content=full over three 30,000-deep posts", cpu, None, "s", None, "< 5 s",
            cpu < 5 and elapsed < 10),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hostile_memory", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two forums, small pages: checks the harness")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="feedbridge-bench-") as workdir:
        ctx = Context(quick=args.quick, workdir=Path(workdir))
        rows = hostile_section(ctx)
    print(table(rows))
    print("\n".join(ctx.notes))
    return 0 if all(row.met for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
