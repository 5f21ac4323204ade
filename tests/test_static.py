"""`feedbridge build --config`: static feed folders for cron and CI, against the fake forum over a socket."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import feedparser
import httpx
import pytest
from lxml import etree, html

from feedbridge.feeds.sources.dialects import MARKDOWN
from feedbridge.staticsite.atomic import is_file_inside
from feedbridge.staticsite.plan import load_build_config
from feedbridge.staticsite.progress import FeedOutcome, Progress
from tests.appserver import running_app, settings_for
from tests.fake_posts import PostSite
from tests.test_cli import invoke
from tests.upstream import IDENTITY, FakeForum, read_at

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "dev-discuss-compiler.md"
SITE = "https://feeds.example.net/dev/"
# Three feeds on one upstream list, and one on another: two upstream pages in all.
FEEDS = """
[[feeds]]
name = "compiler"
path = "c/compiler/5"

[[feeds]]
name = "by-morrison"
path = "c/compiler/5"
author = "morrison-turnansky"

[[feeds]]
name = "inductor"
path = "c/compiler/5"
q = "inductor OR dynamo"
file = "kw/inductor"

[[feeds]]
name = "latest"
path = "latest"
formats = ["atom"]
"""


def write_config(tmp_path: Path, forum: str, feeds: str = FEEDS, fetch: str = "delay = 0", top: str = "") -> Path:
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n{top}\n[fetch]\n{fetch}\n[defaults]\nforum = "{forum}"\n{feeds}')
    return config


def run(config: Path, *args: str) -> tuple[int, str, str]:
    result = invoke("build", "--config", str(config), *args)
    return result.exit_code, result.stdout, result.stderr


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


EXPECTED_FILES = {"compiler.atom", "compiler.rss", "compiler.json", "by-morrison.atom", "by-morrison.rss",
                  "by-morrison.json", "kw/inductor.atom", "kw/inductor.rss", "kw/inductor.json", "latest.atom",
                  "index.html", "feeds.opml"}


def test_clean_build_fetches_each_page_once_and_writes_valid_feeds(tmp_path, upstream):
    code, _out, err = run(write_config(tmp_path, upstream.url), "--out-dir", str(tmp_path / "out"))
    assert code == 0, err
    out = tmp_path / "out"
    assert set(snapshot(out)) == EXPECTED_FILES
    # 3 feeds x 3 formats read the compiler category (/latest.md?category=5&order=activity): one request; plus
    # /latest.md and the forum's basic info
    assert upstream.count(read_at("/c/compiler/5")) == 1
    assert [r.target for r in upstream.requests].count("/latest.md") == 1
    assert upstream.count(IDENTITY) == 1
    assert upstream.count() == 3
    for name in EXPECTED_FILES - {"index.html", "feeds.opml"}:
        if name.endswith(".json"):
            feed = json.loads((out / name).read_bytes())
            assert feed["version"] == "https://jsonfeed.org/version/1.1"
            assert feed["feed_url"] == SITE + name
            continue
        parsed = feedparser.parse((out / name).read_bytes())
        assert parsed.bozo == 0, (name, parsed.get("bozo_exception"))
        etree.fromstring((out / name).read_bytes())
        self_links = [link.href for link in parsed.feed.links if link.rel == "self"]
        assert self_links == [SITE + name]
    by_author = feedparser.parse((out / "by-morrison.atom").read_bytes())
    assert by_author.entries and {e.author for e in by_author.entries} == {"morrison-turnansky"}
    everything = feedparser.parse((out / "compiler.atom").read_bytes())
    assert len(everything.entries) > len(by_author.entries)
    assert "written" in err and "compiler" in err


def test_second_run_rewrites_nothing(tmp_path, upstream):
    config = write_config(tmp_path, upstream.url)
    assert run(config)[0] == 0
    before = snapshot(tmp_path / "public")  # out_dir defaults to public/ next to the config
    assert set(before) == EXPECTED_FILES
    time.sleep(0.01)
    code, out, _err = run(config, "--json")
    assert code == 0
    assert snapshot(tmp_path / "public") == before  # same bytes, same mtimes
    summary = json.loads(out)
    assert {f["status"] for f in summary["feeds"]} == {"unchanged"}
    assert {s["status"] for s in summary["site"]} == {"unchanged"}


def test_failing_upstream_keeps_old_files_finishes_the_others_and_exits_1(tmp_path, upstream):
    config = write_config(tmp_path, upstream.url)
    assert run(config)[0] == 0
    public = tmp_path / "public"
    kept = {name: value for name, value in snapshot(public).items() if name.startswith("latest")}
    upstream.fail("/latest.md", 500)
    upstream.set_body("/c/compiler/5.md", FIXTURE.read_text(encoding="utf-8").replace("Inductor Passes", "Inductor Passes, revised"))
    code, out, err = run(config, "--json")
    assert code == 1
    after = snapshot(public)
    assert {name: value for name, value in after.items() if name.startswith("latest")} == kept
    assert b"Inductor Passes, revised" in after["compiler.atom"][0]  # the other feeds were still built
    assert not [p for p in public.rglob("*") if p.name.startswith(".")]  # no temp files left
    feeds = {f["name"]: f for f in json.loads(out)["feeds"]}
    assert feeds["latest"]["status"] == "failed"
    assert "500" in feeds["latest"]["error"]
    assert feeds["latest"]["files"] == [{"path": "latest.atom", "status": "kept"}]
    assert feeds["compiler"]["status"] == "written"
    assert "latest" in err and "500" in err  # failures are reported even with --json
    assert "latest.atom" in (public / "index.html").read_text(encoding="utf-8")  # the kept file is still listed


def test_short_retry_after_is_waited_out_then_retried_once(tmp_path, upstream):
    upstream.rate_limit("/latest.md", retry_after=1, times=1)
    config = write_config(tmp_path, upstream.url, fetch="delay = 0\nmax_wait = 5")
    started = time.monotonic()
    code, _out, err = run(config)
    assert code == 0, err
    assert time.monotonic() - started >= 1
    assert [r.target for r in upstream.requests].count("/latest.md") == 2
    assert "429" in err and "waiting 1 s" in err


def test_long_retry_after_gives_up_on_the_forum_without_hammering(tmp_path, upstream):
    upstream.rate_limit("/", retry_after=3600, prefix=True)
    config = write_config(tmp_path, upstream.url, fetch="delay = 0\nconcurrency = 1\nmax_wait = 5")
    started = time.monotonic()
    code, out, _err = run(config, "--json")
    assert code == 1
    assert time.monotonic() - started < 5
    assert upstream.count() == 1  # one 429, then no request at all to that forum
    summary = json.loads(out)
    assert {f["status"] for f in summary["feeds"]} == {"failed"}
    assert all("429" in f["error"] or "wait" in f["error"] for f in summary["feeds"])
    assert not (tmp_path / "public" / "compiler.atom").exists()


def test_delay_spaces_requests_to_one_forum(tmp_path, upstream):
    feeds = FEEDS + '\n[[feeds]]\nname = "hot"\npath = "hot"\n[[feeds]]\nname = "top"\npath = "top"\n'
    code, _out, err = run(write_config(tmp_path, upstream.url, feeds, fetch="delay = 0.5"))
    assert code == 0, err
    times = sorted(r.time for r in upstream.requests)
    assert len(times) == 5  # the four lists and the forum's basic info
    # Spaced from one start to the next: a request that reaches the forum late (a loaded machine) shortens
    # the gap after it, never the span of all five by more than its own lateness (0.12 s seen at a load of
    # 10 on two cores, against a 0.3 s margin here); without the delay the span is a few milliseconds.
    assert times[-1] - times[0] >= 4 * 0.5 - 0.3


def test_offline_build_from_a_local_markdown_file(tmp_path, upstream):
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "compiler"\nsource = "{FIXTURE}"\n'
                      '[[feeds]]\nname = "rfc"\nsource = "' + str(FIXTURE) + '"\nq = "RFC"\nformats = ["rss"]\n')
    code, out, _err = run(config, "--json")
    assert code == 0
    assert upstream.count() == 0
    summary = json.loads(out)
    assert summary["requests"] == 0 and {f["fetch"] for f in summary["feeds"]} == {"file"}
    atom = feedparser.parse((tmp_path / "public" / "compiler.atom").read_bytes())
    assert atom.bozo == 0 and len(atom.entries) == 30
    assert atom.feed.link == "https://dev-discuss.pytorch.org/c/compiler/5"
    rss = feedparser.parse((tmp_path / "public" / "rfc.rss").read_bytes())
    assert rss.bozo == 0 and 0 < len(rss.entries) < 30
    assert all("rfc" in e.title.lower() or "rfc" in e.get("summary", "").lower() for e in rss.entries)


def test_example_config_is_valid_and_its_offline_twin_builds_without_network(tmp_path, upstream):
    example = load_build_config(ROOT / "feeds.example.toml")
    assert [(f.name, f.files) for f in example.feeds] == [
        ("compiler", ("compiler.atom", "compiler.rss", "compiler.json")),
        ("compiler-by-morrison", ("compiler-by-morrison.atom", "compiler-by-morrison.rss",
                                  "compiler-by-morrison.json")),
        ("inductor", ("keywords/inductor.atom", "keywords/inductor.rss", "keywords/inductor.json"))]
    assert {MARKDOWN.page_url(spec) for f in example.feeds for spec in f.specs} == {
        "https://dev-discuss.pytorch.org/latest.md?category=5&order=activity"}
    # the command docs/static.md shows
    code, out, err = run(ROOT / "docs" / "feeds.offline.toml", "--out-dir", str(tmp_path / "feeds"), "--json")
    assert code == 0, err
    offline = {f["name"]: f for f in json.loads(out)["feeds"]}
    assert offline.keys() == {f.name for f in example.feeds}
    for feed in example.feeds:
        assert [f["path"] for f in offline[feed.name]["files"]] == list(feed.files)
        for file in feed.files:
            assert (tmp_path / "feeds" / file).is_file()


def test_index_and_opml_are_well_formed_and_escaped(tmp_path, upstream):
    feeds = '[[feeds]]\nname = "odd"\npath = "c/compiler/5"\nq = "\\"<b>\\" OR inductor"\nfile = "a-b/odd_1.x"\n'
    config = write_config(tmp_path, upstream.url, feeds, top='title = "Mine <script>alert(1)</script> & co"')
    assert run(config)[0] == 0
    public = tmp_path / "public"
    page = (public / "index.html").read_text(encoding="utf-8")
    assert "<script>" not in page and "&lt;script&gt;" in page
    tree = html.fromstring(page)
    alternates = tree.xpath('//link[@rel="alternate"]')
    assert [(a.get("type"), a.get("href")) for a in alternates] == [
        ("application/atom+xml", "a-b/odd_1.x.atom"), ("application/rss+xml", "a-b/odd_1.x.rss"),
        ("application/feed+json", "a-b/odd_1.x.json")]
    assert tree.findtext(".//title") == tree.findtext(".//h1") == "Mine <script>alert(1)</script> & co"
    opml = etree.fromstring((public / "feeds.opml").read_bytes())
    assert opml.get("version") == "2.0"
    assert opml.findtext("head/title") == "Mine <script>alert(1)</script> & co"
    [outline] = opml.findall("body/outline")
    assert outline.get("xmlUrl") == SITE + "a-b/odd_1.x.atom"
    assert outline.get("text") == alternates[0].get("title").removesuffix(" (Atom)")


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", ".hidden", "a//b", "c:\\x"])
def test_output_names_escaping_the_folder_are_refused(tmp_path, upstream, name):
    feeds = f'[[feeds]]\nname = "x"\npath = "latest"\nfile = {json.dumps(name)}\n'
    code, _out, err = run(write_config(tmp_path, upstream.url, feeds))
    assert code == 2
    assert "feeds.toml:" in err and "output name" in err
    assert upstream.count() == 0
    assert not (tmp_path / "public").exists()


@pytest.mark.parametrize("name", ["con", "NUL", "kw/aux", "com1.feeds", "Lpt9/x", "kw./inductor", "dots."])
def test_output_names_windows_cannot_hold_are_refused(tmp_path, upstream, name):
    """A built folder may be copied to or served from Windows, where `con.atom` is the console and `kw./` is `kw/`:
    the build wrote such files here, and they were lost or unopenable there."""
    feeds = f'[[feeds]]\nname = "x"\npath = "latest"\nfile = {json.dumps(name)}\n'
    code, _out, err = run(write_config(tmp_path, upstream.url, feeds))
    assert code == 2 and "feeds.toml:" in err and "Windows device" in err, err
    assert upstream.count() == 0


def test_output_names_that_only_look_like_windows_devices_are_built(tmp_path, upstream):
    feeds = '[[feeds]]\nname = "x"\npath = "latest"\nfile = "console/comic.v2"\nformats = ["atom"]\n'
    code, _out, err = run(write_config(tmp_path, upstream.url, feeds))
    assert code == 0, err
    assert (tmp_path / "public" / "console" / "comic.v2.atom").is_file()


@pytest.mark.parametrize(("text", "line", "words"), [
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\npath = "latest"\nlimit = [1\n', 5, "Unclosed"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\npath = latest\n', 4, "Invalid value"),
    ('site_url = "https://x.example/"\ncolour = "red"\n[[feeds]]\nname = "a"\npath = "latest"\n', 2, "colour"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\npath = "latest"\n\n[[feeds]]\nname = "b"\n'
     'path = "latest"\nauthor = "no spaces allowed"\n', 9, "valid username"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\npath = "c/compiler"\n', 4, "no feed route"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\npath = "search"\nq = "gpu"\n', 4,
     "/search is /latest with the same q= now"),  # moved: the replacement named, as an unknown key is refused
    ('site_url = "https://x.example/"\n[fetch]\ndelay = "soon"\n[[feeds]]\nname = "a"\npath = "latest"\n', 3,
     "delay"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\npath = "latest"\nlimit = "ten"\n', 5, "limit"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\nsource = "missing.md"\n', 4, "cannot read"),
    ('[[feeds]]\nname = "a"\npath = "latest"\n', None, "site_url is required"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\npath = "latest"\n[[feeds]]\nname = "b"\n'
     'file = "a"\npath = "hot"\n', 7, "both write a.atom"),
    # every path key refuses a NUL, and out_dir is checked before anything is fetched
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\nsource = "x\\u0000y"\n', 4, "NUL"),
    ('site_url = "https://x.example/"\nout_dir = "o\\u0000x"\n[[feeds]]\nname = "a"\npath = "latest"\n', 2, "NUL"),
    ('site_url = "https://x.example/"\nout_dir = "o\\u0007x"\n[[feeds]]\nname = "a"\npath = "latest"\n', 2,
     "control character"),
    ('site_url = "https://x.example/"\nout_dir = "feeds.toml"\n[[feeds]]\nname = "a"\npath = "latest"\n', 2,
     "not a folder"),
    ('site_url = "https://x.example/"\nout_dir = "feeds.toml/sub"\n[[feeds]]\nname = "a"\npath = "latest"\n', 2,
     "not a folder"),
    # bounded names and paths (a 300-character name was a traceback from the failure handler)
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "' + "a" * 300 + '"\npath = "latest"\n', 3,
     "longer than 200"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\nfile = "' + "b" * 197 + '"\npath = "latest"\n', 4,
     "too long"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\nfile = "' + "/".join(["b" * 150] * 7)
     + '"\npath = "latest"\n', 4, "too long"),
    # one output a folder of another, or of the site's own files
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\npath = "latest"\n[[feeds]]\nname = "b"\n'
     'file = "a.atom/x"\npath = "hot"\n', 7, "writes a.atom as a file"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "b"\nfile = "a.atom/x"\npath = "hot"\n[[feeds]]\n'
     'name = "a"\npath = "latest"\n', 7, "needs as a folder"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "b"\nfile = "index.html/x"\npath = "hot"\n', 4,
     "the site writes index.html"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "b"\nfile = "feeds.opml/x"\npath = "hot"\n', 4,
     "the site writes feeds.opml"),
    # feed names: one each, one line of printable characters
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a"\npath = "latest"\n[[feeds]]\nname = "a"\n'
     'file = "b"\npath = "hot"\n', 6, "two feeds are named 'a'"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a\\nfeedbridge: all good"\nfile = "c"\npath = "hot"\n', 3,
     "control or invisible"),
    ('site_url = "https://x.example/"\n[[feeds]]\nname = "a\\u202eb"\nfile = "c"\npath = "hot"\n', 3,
     "control or invisible"),
    # an error in a default points at the default's own line, in any of its forms
    ('site_url = "https://x.example/"\n\n[defaults]\nlimit = 0\n\n[[feeds]]\nname = "a"\npath = "latest"\n', 4,
     "limit"),
    ('site_url = "https://x.example/"\ndefaults.limit = 0\n\n[[feeds]]\nname = "a"\npath = "latest"\n', 2, "limit"),
    ('site_url = "https://x.example/"\ndefaults = { limit = 0 }\n\n[[feeds]]\nname = "a"\npath = "latest"\n', 2,
     "limit"),
])
def test_config_errors_name_file_and_line_and_fetch_nothing(tmp_path, upstream, text, line, words):
    config = tmp_path / "feeds.toml"
    config.write_text(text.replace("https://x.example/", upstream.url))
    code, out, err = run(config)
    assert code == 2
    assert err.startswith(f"{config}:{line}: " if line else f"{config}: ")
    assert words in err
    assert len(err.strip().splitlines()) == 1 and out == ""
    assert upstream.count() == 0


def test_progress_on_a_terminal_redraws_a_live_line_and_colours_statuses():
    stream = io.StringIO()
    stream.isatty = lambda: True  # type: ignore[method-assign]
    progress = Progress(["a", "bb"], tty=True, quiet=False, stream=stream)
    progress.started("a")
    progress.started("bb")
    progress.feed_done(FeedOutcome("a", "written", "fetched", 1, [("a.atom", "written")], 12.0))
    text = stream.getvalue()
    assert "building 0/2: a, bb" in text and "building 1/2: bb" in text
    assert "\r\x1b[K" in text and "\x1b[32mwritten" in text
    assert "fetched (1 request)" in text and "12 ms" in text


def test_quiet_prints_only_failures(tmp_path, upstream):
    upstream.fail("/latest.md", 503)
    code, out, err = run(write_config(tmp_path, upstream.url), "--quiet")
    assert code == 1 and out == ""
    assert [line.split()[2] for line in err.splitlines() if "failed " in line] == ["latest"]
    assert "compiler" not in err


def test_quiet_is_silent_about_what_a_successful_run_went_without(tmp_path, upstream_json):
    """The cron line's `--quiet`: a content=full feed whose topic pages answer 404 is built (exit 0), each such
    topic keeping its excerpt, and the service's warnings of it reached stderr through logging's last resort,
    three lines a topic at every run, each mailed by cron. Without `--quiet` they are still said."""
    feeds = '[[feeds]]\nname = "full"\npath = "c/compiler/5"\ncontent = "full"\nformats = ["atom"]\n'
    config = write_config(tmp_path, upstream_json.url, feeds=feeds, top=f'out_dir = "{tmp_path / "out"}"')
    command = [sys.executable, "-m", "feedbridge", "build", "--config", str(config)]
    loud = subprocess.run(command, capture_output=True, text=True, timeout=120)
    quiet = subprocess.run([*command, "--quiet"], capture_output=True, text=True, timeout=120)
    assert loud.returncode == quiet.returncode == 0, (loud.stderr, quiet.stderr)
    assert "falls back to its excerpt" in loud.stderr
    assert (quiet.stdout, quiet.stderr) == ("", "")


def test_a_feed_whose_files_cannot_all_be_written_keeps_every_one_of_them(tmp_path, upstream):
    """A disk that fills up or a quota (a file-size limit here, met by the JSON file alone), or a folder where a
    file goes: the feed's first files were replaced and the rest kept, its formats out of step, while the summary
    said every file was kept and the error named no file (or a folder's descriptor). Each file is now written
    whole beside its target before any is renamed: all of them, or none."""
    import resource

    config = write_config(tmp_path, upstream.url, feeds='[[feeds]]\nname = "x"\npath = "c/compiler/5"\n',
                          top=f'out_dir = "{tmp_path / "out"}"')
    command = [sys.executable, "-m", "feedbridge", "build", "--config", str(config), "--json"]
    assert subprocess.run(command, capture_output=True, timeout=120).returncode == 0
    out = tmp_path / "out"
    sizes = {fmt: (out / f"x.{fmt}").stat().st_size for fmt in ("atom", "rss", "json")}
    limit = max(sizes["atom"], sizes["rss"]) + 100
    assert limit < sizes["json"]
    for fmt in sizes:
        (out / f"x.{fmt}").write_text(f"OLD {fmt}\n")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    full = subprocess.run(command, capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    (out / "x.rss").unlink()
    (out / "x.rss").mkdir()
    folder = subprocess.run(command, capture_output=True, text=True, timeout=120)
    for run_, named, statuses in ((full, "x.json", ["kept"] * 3), (folder, "x.rss", ["kept", "missing", "kept"])):
        feed = json.loads(run_.stdout)["feeds"][0]
        assert run_.returncode == 1 and feed["status"] == "failed" and f"'{named}'" in feed["error"], feed
        assert [f["status"] for f in feed["files"]] == statuses
        assert {fmt: (out / f"x.{fmt}").read_text() for fmt in ("atom", "json")} == {"atom": "OLD atom\n",
                                                                                    "json": "OLD json\n"}
    assert not [name for name in os.listdir(out) if name.endswith(".tmp")]


def test_json_summary_shape(tmp_path, upstream):
    code, out, err = run(write_config(tmp_path, upstream.url), "--json")
    assert code == 0 and err == ""
    summary = json.loads(out)
    assert set(summary) == {"ok", "out_dir", "ms", "requests", "feeds", "site", "error"}
    assert summary["ok"] is True and summary["requests"] == 3 and summary["error"] is None  # and the basic info
    assert [f["name"] for f in summary["feeds"]] == ["compiler", "by-morrison", "inductor", "latest"]
    for feed in summary["feeds"]:
        assert set(feed) == {"name", "status", "fetch", "requests", "files", "ms", "error"}
        assert feed["status"] == "written" and feed["error"] is None and feed["ms"] >= 0
        assert all(f["status"] == "written" and (tmp_path / "public" / f["path"]).is_file() for f in feed["files"])
    # The feeds are built in parallel threads, so which feed makes which of the three requests is the threads'
    # timing: source detection reads /latest.md for whichever feed asks first (the latest feed then finds it
    # cached), and the basic info is read by whichever feed reaches it first (seen: three feeds fetched one
    # each, on a loaded machine). Each feed's label is its own count, and with four feeds and three requests
    # at least one is built from what the others fetched.
    assert all(f["fetch"] == ("fetched" if f["requests"] else "cached") for f in summary["feeds"])
    assert 1 <= sum(f["fetch"] == "cached" for f in summary["feeds"]) <= 3
    assert sum(f["requests"] for f in summary["feeds"]) == 3
    assert os.path.samefile(summary["out_dir"], tmp_path / "public")


# Every parameter of issue 26 in a config: thresholds, the `+` form of tag=, exclusions and digests.
SIGNAL_FEEDS = """
[[feeds]]
name = "signal"
path = "latest"
pages = 2
min_replies = 2
min_likes = 3
min_views = 300
exclude_tag = ["rfc", "meta"]
exclude_category = [6]
formats = ["atom", "json"]

[[feeds]]
name = "weekly"
path = "latest"
tag = "gpu+cuda"
digest = "weekly"
limit = 4
formats = ["atom"]

[[feeds]]
name = "daily"
path = "tag/gpu+cuda"
exclude_category = [5]
digest = "daily"
formats = ["rss", "atom"]
"""
SERVED = {"signal": "latest.atom?pages=2&min_replies=2&min_likes=3&min_views=300&exclude_tag=rfc,meta&exclude_category=6",
          "weekly": "latest.atom?tag=gpu%2Bcuda&digest=weekly&limit=4",
          "daily": "tag/gpu+cuda.atom?exclude_category=5&digest=daily"}


def atom_entries(body: bytes) -> dict[str, bytes]:
    return {re.search(rb"<id>([^<]+)</id>", e)[1].decode(): e for e in re.findall(rb"<entry>.*?</entry>", body, re.S)}


@pytest.mark.parametrize("mode", ["markdown", "json"])
def test_a_config_with_every_signal_parameter_builds_the_feeds_the_service_serves(tmp_path, mode):
    with FakeForum(mode=mode, json_lists=True) as forum:
        code, _out, err = run(write_config(tmp_path, forum.url, SIGNAL_FEEDS), "--out-dir", str(tmp_path / "out"))
        assert code == 0, err
        assert max(Counter(r.target for r in forum.requests).values()) == 1  # each page read once a run
        with running_app(settings_for(forum.url)) as app:
            served = {name: httpx.get(app.feed_url(f"/{query}"), timeout=30).content for name, query in SERVED.items()}
    for name, body in served.items():
        built = (tmp_path / "out" / f"{name}.atom").read_bytes()
        got, want = feedparser.parse(built), feedparser.parse(body)
        assert got.bozo == 0 and want.entries and got.feed.title == want.feed.title
        assert [(e.id, e.title, e.updated) for e in got.entries] == [(e.id, e.title, e.updated) for e in want.entries]
        if name != "signal":  # a digest is one feed wherever it is published, and its entries the same bytes
            assert got.feed.id == want.feed.id and atom_entries(built) == atom_entries(body)
    assert len(json.loads((tmp_path / "out" / "signal.json").read_bytes())["items"]) == len(
        feedparser.parse(served["signal"]).entries)


@pytest.mark.parametrize("key", ["min_likes = 3", "min_views = 3", 'exclude_tag = "rfc"', "exclude_category = [6]",
                                 'tag = "gpu+cuda"', 'tag = "gpu"'])
def test_a_source_file_refuses_what_a_markdown_list_does_not_carry(tmp_path, upstream, key):
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "x"\nsource = "{FIXTURE}"\n{key}\n')
    code, out, err = run(config)
    assert code == 2 and out == ""
    assert err.startswith(f"{config}:5: ") and key.split(" ")[0] in err and "saved Markdown list" in err
    assert upstream.count() == 0


def test_a_source_file_of_an_older_dialect_refuses_reply_thresholds(tmp_path, upstream):
    """A C1 list writes no reply counts (`dialects.lacks_of`), so `min_replies` on it would drop every topic:
    refused by name, as the CLI refuses it for the same saved list."""
    config = tmp_path / "feeds.toml"
    older = ROOT / "fixtures" / "dialects" / "widgets-c1.md"
    config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "x"\nsource = "{older}"\nmin_replies = 2\n')
    code, out, err = run(config)
    assert (code, out) == (2, ""), err
    assert err.startswith(f"{config}:5: ") and "min_replies" in err and "reply counts" in err
    assert upstream.count() == 0


def test_a_source_file_makes_digests_and_reply_thresholds_offline(tmp_path, upstream):
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "x"\nsource = "{FIXTURE}"\nmin_replies = 2\n'
                      'digest = "weekly"\nformats = ["atom"]\n')
    code, _out, err = run(config)
    assert code == 0, err
    feed = feedparser.parse((tmp_path / "public" / "x.atom").read_bytes())
    assert feed.bozo == 0 and feed.entries and all("/digest/" in e.id for e in feed.entries)
    assert "weekly digest" in feed.feed.title and upstream.count() == 0


def _saved_copy(folder: Path, forum: FakeForum, mark: str) -> Path:
    """The compiler category's list as saved from the fake forum, its first topic titled `mark`."""
    text = FIXTURE.read_text(encoding="utf-8").replace("https://dev-discuss.pytorch.org", forum.url)
    path = folder / f"{mark}.md"
    path.write_text(text.replace("About the compiler category", mark, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize("key", ['content = "full"', 'path = "u/smth"', 'path = "t/3441"', 'path = "posts"',
                                 'path = "filter"\nq = "status:open"', 'path = "tag/gpu+cuda"'])
def test_a_source_file_refuses_a_feed_that_reads_the_forum_before_anything_is_read(tmp_path, upstream, key):
    # "The file stands in for the list, and nothing is fetched": these read every topic's page, a user's own
    # list, a topic's posts, /posts, /filter or a tag intersection from the forum all the same, exit 0.
    config = tmp_path / "feeds.toml"
    saved = _saved_copy(tmp_path, upstream, "saved")
    config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "x"\nforum = "{upstream.url}"\nsource = "{saved}"\n'
                      f'{key}\n')
    code, out, err = run(config)
    assert code == 2 and out == "" and "source file stands in for" in err, err
    assert upstream.count() == 0


def test_a_feed_built_without_what_the_forum_failed_to_give_keeps_its_better_file(tmp_path, upstream):
    """Every topic page answering 500 made a `content = "full"` feed of excerpts, and the basic info answering
    500 a feed without its language and icon: each replaced the good file, exit 0, "written". Now the old
    file is kept and the feed is failed (exit 1), saying why; a topic the forum says is gone (404) is what the
    feed is now, and the file is written."""
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n[fetch]\ndelay = 0\n[defaults]\nforum = "{upstream.url}"\n'
                      'formats = ["atom"]\n[[feeds]]\nname = "full"\npath = "c/compiler/5"\ncontent = "full"\n'
                      '[[feeds]]\nname = "plain"\npath = "latest"\n')
    assert run(config)[0] == 0
    before = snapshot(tmp_path / "public")
    upstream.fail("/t/", 500, prefix=True)
    upstream.fail(IDENTITY, 500)
    code, _out, err = run(config)
    assert code == 1 and "the forum failed" in err and "which is kept" in err, err
    assert snapshot(tmp_path / "public") == before
    upstream.clear()
    upstream.fail("/t/", 404, prefix=True)  # every topic gone: the feed is its excerpts now
    code, _out, err = run(config)
    assert code == 0, err
    assert (tmp_path / "public" / "full.atom").read_bytes() != before["full.atom"][0]


def test_a_failure_one_feed_met_keeps_every_feed_it_would_make_worse(tmp_path, upstream):
    """Only the feed whose request the forum failed was kept: the others got the same failure remembered (or
    waited on that request) and replaced their better files without the forum's icon and language, "written",
    and a run whose failing feed was new (no file to keep) exited 0."""
    config = tmp_path / "feeds.toml"
    head = f'site_url = "{SITE}"\n[fetch]\ndelay = 0\n[defaults]\nforum = "{upstream.url}"\nformats = ["atom"]\n'
    feeds = "".join(f'[[feeds]]\nname = "{name}"\npath = "{path}"\n'
                    for name, path in (("f1", "c/compiler/5"), ("f2", "top"), ("f3", "hot")))
    config.write_text(head + feeds)
    assert run(config)[0] == 0
    before = snapshot(tmp_path / "public")
    upstream.fail(IDENTITY, 500)
    config.write_text(head + '[[feeds]]\nname = "f0"\npath = "latest"\n' + feeds)
    code, _out, err = run(config)
    assert code == 1 and "which is kept" in err, err
    after = snapshot(tmp_path / "public")
    assert {name: after[name] for name in before if name.endswith(".atom")} == {
        name: value for name, value in before.items() if name.endswith(".atom")}
    assert 1 <= upstream.count(IDENTITY) < 4  # not asked again by every feed


@pytest.mark.timeout(60)
def test_an_interrupted_build_exits_130_without_waiting_for_the_forum(tmp_path, upstream):
    """Ctrl-C (or a CI job cancelled, which sends SIGINT first) was exit 1, the code a CI workflow reads as
    "published, some feed kept its old file", and only once the requests under way had timed out."""
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n[fetch]\ndelay = 0\n[defaults]\nforum = "{upstream.url}"\n'
                      '[[feeds]]\nname = "latest"\npath = "latest"\n')
    upstream.stall("/latest.md", 40)
    # SIGINT as a terminal sends it: a suite started in the background of a script (.ci/run's second Python) ignores
    # it, which a child inherits and Python then leaves ignored, as a background job's should be.
    build = subprocess.Popen([sys.executable, "-m", "feedbridge", "build", "--config", str(config)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 20
    while not upstream.count("/latest.md") and time.monotonic() < deadline:
        time.sleep(0.05)  # the build waits on the forum
    build.send_signal(signal.SIGINT)
    _out, err = build.communicate(timeout=20)  # far inside the forum's 40 s
    assert build.returncode == 130 and b"interrupted" in err, err


@pytest.mark.timeout(60)
def test_a_fifo_where_a_feed_file_goes_is_replaced_not_waited_on(tmp_path, upstream):
    # Whether the bytes changed was read from the name as it was: a FIFO there waited for a writer forever.
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "x"\nsource = "{FIXTURE}"\nformats = ["atom"]\n')
    (tmp_path / "public").mkdir()
    os.mkfifo(tmp_path / "public" / "x.atom")
    code, _out, err = run(config)
    assert code == 0, err
    os.mkfifo(tmp_path / "one.atom")
    result = invoke("build", str(FIXTURE), "-o", str(tmp_path / "one.atom"))
    assert result.exit_code == 0, result.stderr
    for built in (tmp_path / "public" / "x.atom", tmp_path / "one.atom"):
        assert built.is_file() and feedparser.parse(built.read_bytes()).entries
    assert upstream.count() == 0


def test_each_source_file_is_read_by_its_own_feed_alone(tmp_path, upstream):
    # Every source feed's pages went into one map for the whole run, and the page cache was the run's: two saved
    # copies of one list gave both feeds the last one read, and a live feed of the same list was built from a
    # saved copy without asking the forum.
    one, two = _saved_copy(tmp_path, upstream, "SAVED ONE"), _saved_copy(tmp_path, upstream, "SAVED TWO")
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n[defaults]\nformats = ["atom"]\nforum = "{upstream.url}"\n'
                      f'[[feeds]]\nname = "one"\nsource = "{one}"\n[[feeds]]\nname = "two"\nsource = "{two}"\n'
                      '[[feeds]]\nname = "live"\npath = "c/compiler/5"\n')
    code, _out, err = run(config)
    assert code == 0, err
    titles = {name: [e.title for e in feedparser.parse((tmp_path / "public" / f"{name}.atom").read_bytes()).entries]
              for name in ("one", "two", "live")}
    assert "SAVED ONE" in titles["one"] and "SAVED TWO" not in titles["one"]
    assert "SAVED TWO" in titles["two"] and "SAVED ONE" not in titles["two"]
    assert not any(t.startswith("SAVED") for t in titles["live"]) and titles["live"]
    assert upstream.count(read_at("/c/compiler/5")) == 1  # the live feed's list, from the forum


def test_the_examples_of_every_signal_key_in_the_docs_are_valid_config(tmp_path):
    """The commented keys of feeds.example.toml and the block of docs/static.md, as a user copies them."""
    example = re.findall(r"^#   (\w+ = .+?)\s+#", (ROOT / "feeds.example.toml").read_text(encoding="utf-8"), re.M)
    block = re.search(r"```toml\n(\[\[feeds\]\].*?)```", (ROOT / "docs" / "static.md").read_text(encoding="utf-8"), re.S)[1]
    for keys in ("\n".join(example), "\n".join(line for line in block.splitlines()
                                                  if " = " in line and not line.startswith(("name", "path")))):
        config = tmp_path / "feeds.toml"
        config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "x"\npath = "c/compiler/5"\n{keys}\n')
        spec = load_build_config(config).feeds[0].specs[0]
        chosen = spec.filter
        assert (chosen.min_replies, chosen.max_replies, chosen.min_likes, chosen.min_views) == (10, 50, 5, 1000)
        assert (chosen.tags_all, chosen.exclude_tags, chosen.exclude_categories) == ({"gpu", "cuda"}, {"meta"}, {11})
        assert spec.digest == "weekly"


def test_a_linked_folder_inside_out_dir_is_refused_and_a_linked_file_is_replaced(tmp_path, upstream):
    """`out/keywords -> ../victim` wrote victim/inductor.atom (rc 0): nothing is written outside out_dir."""
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    (victim / "inductor.atom").write_bytes(b"SECRET")
    (victim / "compiler.atom").write_bytes(b"LINKED")
    (out / "keywords").symlink_to("../victim")
    (out / "compiler.atom").symlink_to("../victim/compiler.atom")
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\nout_dir = "out"\n[defaults]\nformats = ["atom"]\n'
                      f'[[feeds]]\nname = "inductor"\nsource = "{FIXTURE}"\nfile = "keywords/inductor"\n'
                      f'[[feeds]]\nname = "compiler"\nsource = "{FIXTURE}"\n')
    code, out_text, err = run(config, "--json")
    assert code == 1
    assert (victim / "inductor.atom").read_bytes() == b"SECRET" and (victim / "compiler.atom").read_bytes() == b"LINKED"
    feeds = {f["name"]: f for f in json.loads(out_text)["feeds"]}
    assert feeds["inductor"]["status"] == "failed"
    assert "keywords/inductor.atom" in feeds["inductor"]["error"] and "link" in feeds["inductor"]["error"]
    assert feeds["inductor"]["files"] == [{"path": "keywords/inductor.atom", "status": "missing"}]
    assert feeds["compiler"]["status"] == "written"  # the other feed still written
    assert not (out / "compiler.atom").is_symlink() and b"<feed" in (out / "compiler.atom").read_bytes()
    assert "keywords/inductor.atom" in err
    assert "inductor" not in (out / "index.html").read_text(encoding="utf-8")
    assert sorted(p.name for p in out.iterdir()) == ["compiler.atom", "feeds.opml", "index.html", "keywords"]
    assert upstream.count() == 0


def test_an_output_path_the_system_cannot_take_is_reported_not_raised(tmp_path):
    """The failure handler's kept/missing check raised `File name too long` itself, killing the run."""
    assert is_file_inside(tmp_path, "a" * 300 + ".atom") is False
    assert is_file_inside(tmp_path / "nowhere", "a/b.atom") is False


def test_out_dir_given_on_the_command_line_is_checked_before_fetching(tmp_path, upstream):
    (tmp_path / "afile").write_bytes(b"")
    code, out, err = run(write_config(tmp_path, upstream.url), "--out-dir", str(tmp_path / "afile" / "feeds"))
    assert code == 2 and out == ""
    assert err.startswith(f"{tmp_path / 'feeds.toml'}: --out-dir ") and "not a folder" in err
    assert upstream.count() == 0


def test_an_out_dir_that_cannot_be_written_is_refused_before_fetching(tmp_path, upstream, monkeypatch):
    """The probe's refusal, whoever runs the tests (root writes into a folder of mode 0555)."""
    seen = []

    def refused(dir: str) -> None:  # noqa: A002  (tempfile's own name)
        seen.append(dir)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("feedbridge.staticsite.plan.tempfile.TemporaryFile", refused)
    (tmp_path / "locked").mkdir()
    code, _out, err = run(write_config(tmp_path, upstream.url, top='out_dir = "locked/public"'))
    assert code == 2 and err.startswith(f"{tmp_path / 'feeds.toml'}:2: ")
    assert "cannot write in" in err and "Permission denied" in err
    assert seen == [tmp_path / "locked"]  # the nearest folder that exists
    assert upstream.count() == 0


def test_a_source_must_be_a_regular_file_within_the_body_bound(tmp_path, upstream, monkeypatch):
    """`source = "/dev/zero"` was read whole until the process was killed out of memory."""
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "x"\nsource = "/dev/zero"\n')
    code, _out, err = run(config)
    assert code == 2 and err.startswith(f"{config}:4: ") and "not a regular file" in err
    big = tmp_path / "big.md"
    big.write_bytes(FIXTURE.read_bytes() + b" " * 2048)
    monkeypatch.setenv("FEEDBRIDGE_MAX_BODY_BYTES", str(FIXTURE.stat().st_size + 1024))
    config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "x"\nsource = "{FIXTURE}"\n'
                      f'[[feeds]]\nname = "y"\nsource = "big.md"\n')
    code, _out, err = run(config)
    assert code == 2 and err.startswith(f"{config}:7: ") and "larger than" in err
    assert upstream.count() == 0


def test_a_build_removes_the_temporary_files_an_interrupted_one_left(tmp_path, upstream):
    """Anywhere in the output folder: a folder whose feed has left the config (`old/`) was not swept, and kept
    publishing its leftover. Never through a link (`elsewhere` is outside)."""
    public, elsewhere = tmp_path / "public", tmp_path / "elsewhere"
    (public / "kw").mkdir(parents=True)
    (public / "old" / "deeper").mkdir(parents=True)
    elsewhere.mkdir()
    (public / "linked").symlink_to(elsewhere, target_is_directory=True)
    leftovers = [public / ".compiler.atom.a1b2c3d4.tmp", public / "kw" / ".inductor.rss.zz_9yy8x.tmp",
                 public / "old" / "deeper" / ".gone.json.a1b2c3d4.tmp"]
    for leftover in leftovers:
        leftover.write_bytes(b"half a feed")
    others = [public / ".well-known", public / ".compiler.atom.short.tmp", public / "notes.tmp",
              elsewhere / ".x.atom.a1b2c3d4.tmp"]
    for other in others:
        other.write_bytes(b"mine")
    code, _out, err = run(write_config(tmp_path, upstream.url))
    assert code == 0, err
    assert not any(leftover.exists() for leftover in leftovers)
    assert all(other.read_bytes() == b"mine" for other in others)  # only write_atomic's own names
    assert "removed kw/.inductor.rss.zz_9yy8x.tmp" in err and "removed old/deeper/.gone.json.a1b2c3d4.tmp" in err


def test_the_environment_reaches_a_static_build(tmp_path, upstream, monkeypatch):
    """FEEDBRIDGE_CONTACT_URL goes into the User-Agent of the build's requests; a malformed FEEDBRIDGE_*
    value is exit 2 naming it, before anything is fetched (both were ignored)."""
    monkeypatch.setenv("FEEDBRIDGE_READ_TIMEOUT", "soon")
    config = write_config(tmp_path, upstream.url)
    code, _out, err = run(config)
    assert code == 2 and err.startswith(f"{config}: ") and "FEEDBRIDGE_READ_TIMEOUT" in err
    assert upstream.count() == 0
    monkeypatch.delenv("FEEDBRIDGE_READ_TIMEOUT")
    monkeypatch.setenv("FEEDBRIDGE_CONTACT_URL", "https://feeds.example.net/about")
    # what only the web service reads, which stopped the build (exit 2) where a cron job shares its environment: its
    # keys, of a forum the build does not read, with no FEEDBRIDGE_SECRET; members' feeds with a key no file holds;
    # a secret too short; the address forums send members back to (a build's keys are its config's)
    for name, value in (("FEEDBRIDGE_CREDENTIALS", "other.example=user-api-key:abc"), ("FEEDBRIDGE_PERSONAL", "on"),
                        ("FEEDBRIDGE_CONNECT_KEY", "/nowhere/key.pem"), ("FEEDBRIDGE_SECRET", "short"),
                        ("FEEDBRIDGE_AUTH_REDIRECTS", "web.example=https://feeds.example.net/web.example/connect")):
        monkeypatch.setenv(name, value)
    code, _out, err = run(config)
    assert code == 0, err
    agents = {r.headers.get("user-agent") for r in upstream.requests}
    assert len(agents) == 1 and "(+https://feeds.example.net/about)" in agents.pop()


def test_a_file_is_made_from_the_runs_pages_when_the_forum_fails_midway_and_no_feed_is_kept(upstream):
    """`FeedService.document` builds every file of a run (and `feedbridge build URL`'s): the run's first feed
    reads the list; the forum then fails, and a second feed of the same list (another filter) is made from the
    page the run read, as `feed` makes a web feed from the last good pages. No copy of either feed is kept:
    a run's store is read by nothing after it, and the feed-level cache is not walked at all."""
    from feedbridge.config import parse_forum
    from feedbridge.feeds.request.spec import parse_feed_request
    from feedbridge.feeds.service import FeedService, build_service
    from feedbridge.store.memory import MemoryStore
    from feedbridge.upstream.fetcher import Fetcher

    settings = replace(settings_for(upstream.url, cache_ttl=0), forums=(parse_forum(f"markdown:{upstream.url}"),))
    key = settings.forums[0].key
    store = MemoryStore(settings.cache_max_bytes)
    service = build_service(settings, store, Fetcher(settings))
    specs = [parse_feed_request(settings, f"{key}/latest.atom", args) for args in ({}, {"q": ["torch"]})]
    try:
        first = service.document(specs[0], None)
        upstream.fail("/latest.md", 500)
        second = service.document(specs[1], None)
    finally:
        service.close()
    whole, filtered = feedparser.parse(first), feedparser.parse(second)
    assert whole.bozo == 0 and filtered.bozo == 0 and len(whole.entries) == 30
    assert 0 < len(filtered.entries) < 30 and all("torch" in (e.title + e.get("summary", "")).lower() for e in filtered.entries)
    assert [r.target for r in upstream.requests].count("/latest.md") == 2  # the second feed asked, and was failed
    assert [store.get(FeedService.feed_key(spec, None)) for spec in specs] == [None, None]


def test_an_empty_lists_feed_keeps_its_date_and_its_file_from_run_to_run(tmp_path, upstream):
    """A list with no topic has no date of its own: its Atom feed was dated at each run, so an empty category's
    file changed at every run of a cron job (a commit an hour for a site kept in git). Its date is now the one
    the file written before gave itself, as the service's rebuild gives its held copy's; so is the CLI's `-o`.
    The file written before is dated back here, as an earlier run's would be, rather than waiting for the clock."""
    feeds = '[[feeds]]\nname = "empty"\npath = "latest"\ncategory = 77\nformats = ["atom", "rss", "json"]\n'
    config = write_config(tmp_path, upstream.url, feeds)
    cli = tmp_path / "cli" / "empty.atom"
    assert run(config)[0] == 0
    assert invoke("build", f"{upstream.url}/latest?category=77", "-o", str(cli)).exit_code == 0
    for atom in (tmp_path / "public" / "empty.atom", cli):
        written = atom.read_bytes()
        assert b"<entry>" not in written and written.count(b"<updated>") == 1
        atom.write_bytes(re.sub(rb"<updated>[^<]{1,40}</updated>", b"<updated>2026-01-02T03:04:05+00:00</updated>",
                                written))
    first = snapshot(tmp_path / "public")
    earlier = cli.read_bytes()
    assert run(config)[0] == 0
    assert invoke("build", f"{upstream.url}/latest?category=77", "-o", str(cli)).exit_code == 0
    assert {k: v for k, v in snapshot(tmp_path / "public").items() if k.startswith("empty")} == \
        {k: v for k, v in first.items() if k.startswith("empty")}
    assert cli.read_bytes() == earlier


def test_an_empty_saved_lists_feed_keeps_its_date_and_its_file_from_run_to_run(tmp_path, upstream):
    """`feedbridge build SAVED.md -o FILE` and `build - -o FILE`, a cron job saving the list again before each:
    an empty list's feed was dated by the saved file's time (or now, from stdin), so its bytes changed at every
    run. It now gives again the date the file written before gave itself, as `build URL -o` does."""
    text = httpx.get(f"{upstream.url}/latest.md?category=77", timeout=10).content
    saved, out = tmp_path / "saved.md", {name: tmp_path / f"{name}.atom" for name in ("file", "stdin")}
    runs = {"file": lambda: invoke("build", str(saved), "-o", str(out["file"])),
            "stdin": lambda: invoke("build", "-", "-o", str(out["stdin"]), stdin=text)}
    saved.write_bytes(text)
    for name, build in runs.items():
        assert build().exit_code == 0
        written = out[name].read_bytes()
        assert b"<entry>" not in written and written.count(b"<updated>") == 1
        out[name].write_bytes(re.sub(rb"<updated>[^<]{1,40}</updated>", b"<updated>2026-01-02T03:04:05+00:00</updated>",
                                     written))
    earlier = {name: path.read_bytes() for name, path in out.items()}
    saved.write_bytes(text)
    os.utime(saved, (time.time() + 5, time.time() + 5))  # saved again, later
    for name, build in runs.items():
        assert build().exit_code == 0
        assert out[name].read_bytes() == earlier[name], name


def test_a_default_is_for_the_feeds_that_take_it(tmp_path):
    """`[defaults] content = "full"` made every post feed of the config impossible (`content=` is for every feed but
    /t/… and /posts), with no way out: a feed's own `content = "excerpt"` was refused as well. A default is now
    given to the feeds that take it; a feed's own value is still checked as the web checks it."""
    with FakeForum(posts=PostSite.standard().answer) as forum:
        head = f'site_url = "{SITE}"\n[fetch]\ndelay = 0\n[defaults]\nforum = "{forum.url}"\nformats = ["atom"]\n'
        feeds = '[[feeds]]\nname = "c"\npath = "c/compiler/5"\nlimit = 3\n[[feeds]]\nname = "posts"\npath = "posts"\n'
        config = tmp_path / "feeds.toml"
        config.write_text(head + 'content = "full"\n' + feeds)
        code, _out, err = run(config)
    assert code == 0, err
    assert b"<content" in (tmp_path / "public" / "c.atom").read_bytes()  # the category's feed took it
    config.write_text(head + feeds.replace('path = "posts"\n', 'path = "posts"\ncontent = "full"\n'))
    code, _out, err = run(config)
    assert code == 2 and "content" in err and "feeds.toml:" in err, err


@pytest.mark.parametrize("default", ["pages = 2", 'content = "full"'])
def test_a_default_a_saved_list_does_not_take_is_not_given_to_it(tmp_path, upstream, default):
    """A saved list is one page of excerpts: `[defaults] pages = 2` or `content = "full"` (for the live feeds)
    refused the whole config when it also had a `source =` feed, and the pages error named only the defaults'
    line. Such a default is not the saved list's; the feed's own value is still refused."""
    feeds = f'[[feeds]]\nname = "live"\npath = "c/compiler/5"\n[[feeds]]\nname = "saved"\nsource = "{FIXTURE}"\n'
    config = write_config(tmp_path, upstream.url, feeds=feeds.replace("[[feeds]]", default + "\n[[feeds]]", 1))
    code, _out, err = run(config)
    assert code == 0, err
    assert feedparser.parse((tmp_path / "public" / "saved.atom").read_bytes()).entries
    config.write_text(config.read_text() + default + "\n")  # the saved feed's own
    code, _out, err = run(config)
    assert code == 2 and "feeds.toml:" in err and default.split()[0] in err, err


def test_a_feed_name_that_is_no_output_name_is_told_to_take_a_file(tmp_path, upstream):
    feeds = '[[feeds]]\nname = "Café"\npath = "latest"\n'
    code, _out, err = run(write_config(tmp_path, upstream.url, feeds))
    assert code == 2 and "give the feed a file" in err, err
    code, _out, err = run(write_config(tmp_path, upstream.url, feeds + 'file = "cafe"\nformats = ["atom"]\n'))
    assert code == 0 and (tmp_path / "public" / "cafe.atom").is_file(), err
