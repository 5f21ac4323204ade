"""The `feedbridge` command as a user runs it: real files, the fake forum for URLs, and a real subprocess for
the entry point itself (`spawn`); the rest run the same command in this process (`run`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import feedparser
import httpx
import pytest
from click.testing import CliRunner, Result

from feedbridge.cli import main
from tests.appserver import free_port, running_app, settings_for
from tests.upstream import IDENTITY, read_at

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "fixtures" / "dev-discuss-compiler.md"


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """The command in this process, through click's test runner: the same `main`, arguments, stdin, exit
    status and separate stdout and stderr as a subprocess, without a second interpreter importing the
    project for each call (about 0.8 s of CPU, which the suite paid over a hundred times a run). An
    exception the command does not turn into an exit status is raised here, where a subprocess would
    print its traceback. `spawn` runs the real `python -m feedbridge`."""
    result = invoke(*args, stdin=stdin)
    return subprocess.CompletedProcess(["feedbridge", *args], result.exit_code, result.stdout_bytes,
                                       result.stderr_bytes)


def invoke(*args: str, stdin: bytes | None = None) -> Result:
    """click's result of the command run in this process; an exception it did not turn into an exit status
    is raised."""
    result = CliRunner().invoke(main, list(args), input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def spawn(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """`python -m feedbridge` as a user runs it: a real subprocess."""
    return subprocess.run([sys.executable, "-m", "feedbridge", *args], cwd=ROOT, input=stdin,
                          capture_output=True, timeout=60)


def test_parse_json_matches_expected_keys_and_values():
    result = spawn("parse", str(SEED))
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    expected = json.loads(SEED.with_suffix(".expected.json").read_text(encoding="utf-8"))
    for key, value in expected.items():
        if key != "topics":
            assert got[key] == value
    assert [{k: t[k] for k in expected["topics"][0]} for t in got["topics"]] == expected["topics"]


def test_parse_from_stdin_with_base_url():
    text = (ROOT / "fixtures" / "dialects" / "widgets-p2.md").read_bytes()
    result = spawn("parse", "-", "--base-url", "https://forum.example.org", stdin=text)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["topics"][0]["url"] == "https://forum.example.org/t/about-the-widgets-category/11"


@pytest.mark.parametrize("fmt", ["atom", "rss", "json"])
def test_build_with_filters_to_stdout(fmt):
    result = run("build", str(SEED), "--format", fmt, "--query", "inductor OR dynamo", "--limit", "4")
    assert result.returncode == 0, result.stderr
    if fmt == "json":
        items = json.loads(result.stdout)["items"]
    else:
        parsed = feedparser.parse(result.stdout)
        assert parsed.bozo == 0
        items = parsed.entries
    assert len(items) == 4


def test_build_by_author():
    result = run("build", str(SEED), "--author", "Morrison-Turnansky", "--format", "atom")
    entries = feedparser.parse(result.stdout).entries
    assert [e.id.rsplit("/", 1)[1] for e in entries] == ["3341", "3321", "3302"]
    assert "author: morrison-turnansky" in feedparser.parse(result.stdout).feed.title


def test_build_output_is_atomic_and_failures_keep_the_old_file(tmp_path):
    out = tmp_path / "feed.atom"
    assert run("build", str(SEED), "-o", str(out)).returncode == 0
    good = out.read_bytes()
    assert feedparser.parse(good).bozo == 0
    (tmp_path / "login.html").write_text("<!DOCTYPE html><html><body>Log in</body></html>")
    failed = run("build", str(tmp_path / "login.html"), "-o", str(out))
    assert failed.returncode == 1
    assert b"HTML document" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    assert out.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feed.atom", "login.html"]  # no temp files left
    # a name near the file system's 255 bytes: its temporary file's was past them ("File name too long")
    long = tmp_path / ("é" * 120 + "a.atom")  # 246 bytes
    assert run("build", str(SEED), "-o", str(long)).returncode == 0 and long.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["feed.atom", "login.html", long.name])


def test_build_is_byte_identical_across_runs():
    assert run("build", str(SEED), "--format", "rss").stdout == run("build", str(SEED), "--format", "rss").stdout


def test_build_from_a_url(upstream):
    result = run("build", f"{upstream.url}/c/compiler/5.md", "--format", "json")
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)["items"]
    assert items[0]["id"] == f"{upstream.url}/t/3441"
    request = upstream.requests[-1]
    assert request.headers["user-agent"].startswith("feedbridge/")


def test_a_url_builds_in_the_web_services_environment(upstream, monkeypatch):
    """`feedbridge build URL` run where the service runs (a PaaS's one-off dyno, a cron on its host) reads the
    environment as a static build does (`Settings.for_run`): what only the web reads (its keys, signing, members'
    feeds) and what the settings say of other forums stopped it, exit 2 on a FEEDBRIDGE_MULTISITE of the service's
    forums or on FEEDBRIDGE_CREDENTIALS without FEEDBRIDGE_SECRET. A setting every run reads still counts."""
    for name, value in {"FEEDBRIDGE_FORUMS": "https://a.example https://b.example",
                        "FEEDBRIDGE_MULTISITE": "a.example,b.example", "FEEDBRIDGE_FILTER_TERMS": "a.example=assigned",
                        "FEEDBRIDGE_CREDENTIALS": "a.example=user-api-key:not-a-key!", "FEEDBRIDGE_PERSONAL": "on",
                        "FEEDBRIDGE_CONTACT_URL": "https://ops.example/bridge"}.items():
        monkeypatch.setenv(name, value)
    result = run("build", f"{upstream.url}/c/compiler/5.md", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["items"]) == 30
    headers = upstream.requests[-1].headers
    assert headers["user-agent"].endswith("(+https://ops.example/bridge)")
    assert not {"user-api-key", "api-key"} & set(headers)


def test_url_failures_exit_1(upstream):
    upstream.fail("/latest.md", 500)
    result = run("build", f"{upstream.url}/latest.md")
    assert result.returncode == 1
    assert b"answered 500" in result.stderr


@pytest.mark.parametrize("args", [
    ("build", str(SEED), "--format", "xml"),
    ("build", str(SEED), "--limit", "0"),
    ("build", str(SEED), "--query", '""'),
    ("build",),
    ("parse",),
])
def test_usage_errors_exit_2(args):
    result = run(*args)
    assert result.returncode == 2
    assert result.stdout == b""


def test_missing_file_exits_1():
    result = spawn("parse", "no/such/file.md")
    assert result.returncode == 1
    assert b"cannot read 'no/such/file.md'" in result.stderr


def test_serve_fails_fast_on_bad_config():
    env = {**os.environ, "FEEDBRIDGE_FORUMS": "ftp://nope"}
    result = subprocess.run([sys.executable, "-m", "feedbridge", "serve"], env=env, capture_output=True, timeout=30)
    assert result.returncode == 2  # a usage error, as for every command that reads the settings
    assert b"FEEDBRIDGE_FORUMS" in result.stderr and b"Traceback" not in result.stderr


@pytest.mark.parametrize("args", [
    ("build", "https://forum.example/latest.md"),
    ("parse", "https://forum.example/latest.md"),
    ("sign", "/dev-discuss.pytorch.org/latest.atom"),
])
def test_a_bad_setting_is_a_usage_error_for_every_command_that_reads_them(args, monkeypatch):
    """A malformed variable is the user's to fix, as a bad option is: exit 2 naming it (`serve`: above)."""
    monkeypatch.setenv("FEEDBRIDGE_READ_TIMEOUT", "abc")
    result = run(*args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.decode().strip().splitlines() == ["Error: FEEDBRIDGE_READ_TIMEOUT must be a number, not 'abc'"]


@pytest.mark.parametrize(("where", "why"), [("afile/x.atom", "Not a directory"), ("/proc/x.atom", ""),
                                            ("afolder", "Is a directory")])
def test_an_unwritable_output_fails_naming_it(tmp_path, where, why):
    """docs/cli.md: `cannot write PATH: reason` (exit 1). A path through a file said "File exists", and a folder
    was click's own usage error (exit 2)."""
    (tmp_path / "afile").touch()
    (tmp_path / "afolder").mkdir()
    out = tmp_path / where
    result = spawn("build", str(SEED), "-o", str(out))
    assert result.returncode == 1
    assert result.stderr.decode().startswith(f"Error: cannot write {out}: {why}")
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == b""


@pytest.mark.parametrize("where", [".", "/"])
def test_an_output_named_as_a_folder_is_a_directory(where):
    """`-o .` and `-o /` said "No such file or directory": the temporary file was renamed onto an empty name."""
    result = run("build", str(SEED), "-o", where)
    assert (result.returncode, result.stderr.decode().strip()) == (1, f"Error: cannot write {where}: Is a directory")


@pytest.mark.parametrize("args,named", [
    (("--query", "x"), "--query"),
    (("-o", "f.atom"), "--output"),
    (("--format", "rss"), "--format"),
    (("--self-url", "https://x.example/f.atom"), "--self-url"),
    (("--base-url", "https://x.example"), "--base-url"),
    ((str(SEED),), "SOURCE"),
])
def test_build_config_refuses_what_only_one_feed_takes(tmp_path, args, named):
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n[[feeds]]\nname = "all"\nsource = {json.dumps(str(SEED))}\n')
    result = run("build", "--config", str(config), "--out-dir", str(tmp_path / "out"), *args)
    assert result.returncode == 2
    assert named in result.stderr.decode() and "--config" in result.stderr.decode()
    assert not (tmp_path / "out").exists() and not Path("f.atom").exists()


@pytest.mark.parametrize("args,named", [
    (("--out-dir", "d"), "--out-dir"), (("--quiet",), "--quiet"), (("--json",), "--json")])
def test_build_of_one_feed_refuses_what_only_config_takes(args, named):
    result = run("build", str(SEED), *args)
    assert result.returncode == 2 and result.stdout == b""
    assert named in result.stderr.decode() and "--config" in result.stderr.decode()


def test_a_rejected_feed_value_names_its_option():
    result = run("build", str(SEED), "--author", "a b")
    assert result.returncode == 2
    assert "--author" in result.stderr.decode()


@pytest.mark.parametrize("source", ["/dev/zero", "big", "dir"])
def test_a_saved_list_is_a_regular_file_of_bounded_size(tmp_path, source):
    """`build /dev/zero` read until memory ran out: a saved list is a regular file no larger than a list
    the service would read (FEEDBRIDGE_MAX_BODY_BYTES' default)."""
    big = tmp_path / "big"
    big.write_bytes(SEED.read_bytes() + b"\n" * 6 * 1024 * 1024)
    (tmp_path / "dir").mkdir()
    path = source if source.startswith("/") else str(tmp_path / source)
    for command in ("build", "parse"):
        result = spawn(command, path)
        assert result.returncode == 1
        assert result.stderr.decode().startswith(f"Error: cannot read {path!r}: ")  # quoted: a name may hold anything
        assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == b""
    piped = run("build", "-", stdin=big.read_bytes())
    assert piped.returncode == 1 and b"cannot read -: " in piped.stderr


def test_serve_runs_the_production_server(upstream):
    port = free_port()
    env = {**os.environ, "FEEDBRIDGE_FORUMS": upstream.url, "WEB_CONCURRENCY": "1"}
    process = subprocess.Popen([sys.executable, "-m", "feedbridge", "serve", "--port", str(port)], cwd=ROOT,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                assert process.poll() is None and time.monotonic() < deadline, "feedbridge serve did not come up"
                time.sleep(0.2)
        assert health.json()["forums"] == [upstream.url.split("//", 1)[1]]
        assert health.headers["server"].startswith("gunicorn")
        feed = httpx.get(f"http://127.0.0.1:{port}/{upstream.url.split('//', 1)[1]}/latest.rss", timeout=10)
        assert feedparser.parse(feed.content).bozo == 0
    finally:
        process.terminate()
        process.wait(15)


def test_build_refuses_a_categories_directory():
    result = run("build", str(ROOT / "fixtures" / "site" / "categories.md"), "--format", "rss")
    assert result.returncode == 1 and result.stdout == b""
    assert b"looks like a categories directory" in result.stderr and b"/t/5" not in result.stderr
    empty = run("build", str(ROOT / "fixtures" / "dialects" / "widgets-c4-empty.md"), "--format", "rss")
    assert empty.returncode == 0, empty.stderr
    assert feedparser.parse(empty.stdout).entries == [] and feedparser.parse(empty.stdout).bozo == 0


def test_build_of_a_saved_json_list_is_the_feed_the_service_serves(upstream_json, tmp_path):
    saved = tmp_path / "latest.json"
    saved.write_bytes(httpx.get(f"{upstream_json.url}/latest.json", timeout=10).content)
    with running_app(settings_for(upstream_json.url)) as app:
        served = feedparser.parse(httpx.get(app.feed_url("/latest.atom?q=autotuning%20OR%20backward&limit=4"),
                                            timeout=10).content)
    self_url = next(link.href for link in served.feed.links if link.rel == "self")
    result = run("build", str(saved), "--base-url", upstream_json.url, "--query", "autotuning OR backward",
                 "--limit", "4", "--self-url", self_url)
    assert result.returncode == 0, result.stderr
    built = feedparser.parse(result.stdout)
    assert built.bozo == 0 and len(built.entries) == 4
    assert (built.feed.id, built.feed.title, built.feed.subtitle) == (
        served.feed.id, served.feed.title, served.feed.subtitle)
    assert [(e.id, e.title, e.updated, e.get("author")) for e in built.entries] == [
        (e.id, e.title, e.updated, e.get("author")) for e in served.entries]


def test_a_saved_json_list_needs_its_forum():
    result = run("build", str(ROOT / "fixtures" / "site-json" / "latest.json"))
    assert result.returncode == 2 and b"--base-url" in result.stderr


SITE = "https://feeds.example.net/saved/"
# One saved list as three feeds: a config's keys, and the `build SOURCE` options that say the same.
SAVED_FEEDS = {
    "all": ("", ()),
    "keywords": ('q = "inductor OR dynamo"\nlimit = 4\n', ("--query", "inductor OR dynamo", "--limit", "4")),
    "digest": ('author = "morrison-turnansky"\nmin_replies = 1\ndigest = "weekly"\n',
               ("--author", "morrison-turnansky", "--min-replies", "1", "--digest", "weekly")),
}


def test_a_saved_list_builds_the_files_its_static_config_writes(tmp_path):
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{SITE}"\n' + "".join(
        f'[[feeds]]\nname = "{name}"\nsource = {json.dumps(str(SEED))}\n{keys}' for name, (keys, _) in SAVED_FEEDS.items()))
    static = run("build", "--config", str(config), "--quiet")
    assert static.returncode == 0, static.stderr
    for name, (_keys, options) in SAVED_FEEDS.items():
        for fmt in ("atom", "rss", "json"):
            built = run("build", str(SEED), "--format", fmt, "--self-url", f"{SITE}{name}.{fmt}", *options)
            assert built.returncode == 0, built.stderr
            assert built.stdout == (tmp_path / "public" / f"{name}.{fmt}").read_bytes(), (name, fmt)


def test_a_saved_json_list_is_built_without_asking_its_forum(upstream_json, tmp_path):
    saved = tmp_path / "latest.json"
    saved.write_bytes(httpx.get(f"{upstream_json.url}/latest.json", timeout=10).content)
    asked = upstream_json.count()
    result = run("build", str(saved), "--base-url", upstream_json.url, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["items"] and upstream_json.count() == asked  # not even its category names


@pytest.mark.parametrize(("url", "option"), [
    ("http://127.0.0.1:9/top?period=weekly", ("--period", "daily")),
    ("http://127.0.0.1:9/latest?category=5", ("--category", "9")),
    ("http://127.0.0.1:9/search?q=foo", ("--query", "bar")),
    ("http://127.0.0.1:9/tags/c/compiler/5/gpu", ("--tag", "rfc")),
])
def test_an_option_the_urls_query_gives_already_is_refused_by_name(url, option):
    """The option replaced the URL's value without a word (`--tag rfc` on a gpu tag's URL read rfc alone), where
    the web refuses a parameter given twice. Refused before anything is fetched (the forum is a closed port)."""
    result = invoke("build", url, *option)
    assert result.exit_code == 2 and f"Invalid value for {option[0]}" in result.stderr, result.stderr
    assert "already" in result.stderr


@pytest.mark.parametrize(("option", "value"), [("--limit", "1_0"), ("--limit", "\u0663"), ("--min-replies", "1_000"),
                                               ("--limit", "0x10")])
def test_a_number_option_is_read_as_the_table_reads_a_url(option, value):
    """click's `int` read `1_0` and an Arabic-Indic digit as numbers, which the web refuses (ASCII digits
    only): the options are read by the parameter table, as a URL's values are, and refused naming the option."""
    result = invoke("build", str(SEED), option, value)
    assert result.exit_code == 2 and f"Invalid value for {option}" in result.stderr, result.stderr
    assert "whole number" in result.stderr
    assert invoke("build", str(SEED), option, "5").exit_code == 0


def test_a_forum_address_the_cli_refuses_is_named_as_given_not_as_a_setting():
    """The errors named FEEDBRIDGE_FORUMS, a setting a CLI run does not read, for a SOURCE URL with a user and
    for a `--base-url` that is no http(s) URL."""
    from_url = invoke("build", "http://user@host.example/latest")
    assert from_url.exit_code == 2 and "SOURCE" in from_url.stderr and "no query, fragment or user" in from_url.stderr
    given = invoke("build", "http://host.example/latest", "--base-url", "ftp://x")
    assert given.exit_code == 2 and "--base-url" in given.stderr
    saved = invoke("build", str(SEED), "--base-url", "ftp://x")
    assert saved.exit_code == 2
    assert all("FEEDBRIDGE_FORUMS" not in r.stderr for r in (from_url, given, saved)), saved.stderr


def test_a_url_of_a_forum_in_a_subfolder_says_how_to_name_it():
    """The forum is taken from a SOURCE URL's host, so a subfolder forum's path was refused as no feed, and
    nothing said that `--base-url` names its root. Refused before anything is fetched (the forum is a closed port)."""
    result = invoke("build", "http://127.0.0.1:9/community/c/compiler/5")
    assert result.exit_code == 2 and "does not recognise /community/c/compiler/5" in result.stderr, result.stderr
    assert "(http://127.0.0.1:9/community) is named with --base-url" in result.stderr
    named = invoke("build", "http://127.0.0.1:9/community/c/compiler/5", "--base-url", "http://127.0.0.1:9/community")
    assert named.exit_code == 1 and "does not recognise" not in named.stderr  # read: the closed port fails it
    slug = invoke("build", "http://127.0.0.1:9/c/compiler")  # a category by its slug: no subfolder to name
    assert slug.exit_code == 2 and "slug alone" in slug.stderr and "--base-url" not in slug.stderr, slug.stderr


def test_a_once_only_option_given_twice_is_refused_as_the_web_refuses_it(upstream):
    """click kept the last of a repeated option: `--limit 1 --limit 2` was a feed of 2 (exit 0), where the web answers
    `?limit=1&limit=2` with a 400 naming `limit`."""
    for args in (["--limit", "1", "--limit", "2"], ["-q", "dynamo", "-q", "zzzz"], ["--content", "full", "--content",
                                                                                   "excerpt"]):
        result = invoke("build", f"{upstream.url}/c/compiler/5", *args)
        assert result.exit_code == 2 and "given 2 times; give it once" in result.stderr, (args, result.stderr)
        assert args[0] in result.stderr
    assert upstream.count() == 0
    assert invoke("build", f"{upstream.url}/c/compiler/5", "--tag", "a", "--tag", "b").exit_code == 0  # repeatable


def test_a_url_ending_in_md_names_the_feed_on_a_forum_whose_markdown_is_off(upstream_json):
    """`…/c/compiler/5.md` names the category's feed, as on the server, whatever the forum serves: the build read the
    forum through Markdown because of the suffix, and a JSON-only forum's category was "missing, or private"."""
    with running_app(settings_for(upstream_json.url)) as app:
        served = feedparser.parse(httpx.get(app.feed_url("/c/compiler/5.atom"), timeout=20).content)
    for suffix in (".md", ".json", ""):
        result = invoke("build", f"{upstream_json.url}/c/compiler/5{suffix}")
        assert result.exit_code == 0, (suffix, result.stderr)
        built = feedparser.parse(result.stdout_bytes)
        assert [e.id for e in built.entries] == [e.id for e in served.entries], suffix


@pytest.mark.parametrize(("query", "named"), [
    ("/top?period=montly", "period=montly"), ("/top/bogus", None), ("/latest?category=abc", "category=abc"),
    ("/c/compiler/5?min_likes=5", "--min-likes"), ("/c/compiler/5?author=x", "--author"),
    ("/latest?q=inductor", "--query")])
def test_a_bridge_parameter_the_urls_feed_does_not_read_is_refused(upstream, query, named):
    """The paste box reads such a URL as the forum would and says which feed it made; a build printed that other
    feed (every period's top list, the whole forum's latest, an unfiltered category) with exit 0."""
    result = invoke("build", f"{upstream.url}{query}")
    if named is None:  # the forum's own path: its view is the top list of every period, as the paste box says
        assert result.exit_code == 0, result.stderr
        return
    assert result.exit_code == 2 and named in result.stderr and "SOURCE" in result.stderr, result.stderr
    assert upstream.count() == 0


def test_the_forums_own_query_and_the_urls_read_parameters_are_built(upstream):
    for query in ("/latest?page=2&order=activity", "/top?period=weekly", "/latest?category=5",
                  "/search?q=inductor", "/c/compiler/5/l/top/monthly"):
        result = invoke("build", f"{upstream.url}{query}")
        assert result.exit_code == 0, (query, result.stderr)


def test_build_o_keeps_a_better_file_when_the_forum_failed_part_of_the_feed(upstream, tmp_path):
    """As a static build keeps a feed's file: with the forum's basic info answering 500, `-o` replaced a feed that
    had the forum's icon with one without it, exit 0 (a cron job published the worse feed without a word)."""
    output = tmp_path / "compiler.atom"
    assert invoke("build", f"{upstream.url}/c/compiler/5", "-o", str(output)).exit_code == 0
    good = output.read_bytes()
    assert b"<icon>" in good
    upstream.fail(IDENTITY, 500)
    result = invoke("build", f"{upstream.url}/c/compiler/5", "-o", str(output))
    assert result.exit_code == 1 and "which is kept" in result.stderr and "500" in result.stderr, result.stderr
    assert output.read_bytes() == good
    printed = invoke("build", f"{upstream.url}/c/compiler/5")  # to stdout: nothing better to keep
    assert printed.exit_code == 0 and b"<icon>" not in printed.stdout_bytes
    fresh = tmp_path / "new.atom"  # no file yet: the feed as the forum gives it now
    assert invoke("build", f"{upstream.url}/c/compiler/5", "-o", str(fresh)).exit_code == 0 and fresh.is_file()


def test_build_o_on_a_forum_whose_markdown_lists_fail_keeps_nothing_for_the_detection(upstream_json, tmp_path):
    """A forum whose Markdown lists answer 500 is read from its JSON lists; what detecting that read (the feed's
    own list as Markdown, the probe) leaves the feed none the worse, so `-o` replaces its file, exit 0. Counted,
    the feed's own Markdown list (read while the forum was undecided) kept the file and failed the run."""
    upstream_json.fail("/latest.md", 500)  # the probe
    upstream_json.fail(read_at("/c/compiler/5"), 500)  # the feed's own list, `/latest.md?category=5&order=activity`
    output = tmp_path / "compiler.atom"
    for _ in range(2):  # the second run has a file to keep
        result = invoke("build", f"{upstream_json.url}/c/compiler/5", "-o", str(output))
        assert result.exit_code == 0, result.stderr
    assert upstream_json.count(read_at("/c/compiler/5")) == 2 and upstream_json.count(read_at("/c/compiler/5", "json")) == 2


def test_build_o_gives_a_feed_no_date_before_the_file_it_replaces(upstream, tmp_path):
    """A cron job's `-o` rebuild after the newest topic was deleted dated the file at the next newest topic, back
    from the date it had; now the date the file written before gave itself is the rebuild's floor, as the web's
    held copy is (`FeedService._document`). Printed to stdout, with no file before it, the date is the list's."""
    output, listed = tmp_path / "compiler.atom", httpx.get(upstream.url + read_at("/c/compiler/5"), timeout=10).text
    assert invoke("build", f"{upstream.url}/c/compiler/5", "-o", str(output)).exit_code == 0
    first = feedparser.parse(output.read_bytes())
    newest = max(first.entries, key=lambda e: e.updated_parsed)
    start = listed.rindex("## [", 0, listed.index(f"]({newest.link})"))
    upstream.set_body(read_at("/c/compiler/5"), listed[:start] + listed[listed.index("---", start) + 3:])
    assert invoke("build", f"{upstream.url}/c/compiler/5", "-o", str(output)).exit_code == 0
    again = feedparser.parse(output.read_bytes())
    assert newest.link not in [e.link for e in again.entries] and again.feed.updated_parsed == first.feed.updated_parsed
    printed = feedparser.parse(invoke("build", f"{upstream.url}/c/compiler/5").stdout_bytes)
    assert printed.feed.updated_parsed == max(e.updated_parsed for e in again.entries) < first.feed.updated_parsed


def test_build_o_takes_no_date_from_a_file_of_another_feed(upstream, tmp_path):
    """The file `-o` replaces is this feed's floor only if it holds this feed (its Atom id): written with the
    compiler category's feed, it dated the latest feed at the category's newer date."""
    output = tmp_path / "feed.atom"
    alone = feedparser.parse(invoke("build", f"{upstream.url}/latest").stdout_bytes).feed.updated_parsed
    assert invoke("build", f"{upstream.url}/c/compiler/5", "-o", str(output)).exit_code == 0
    other = feedparser.parse(output.read_bytes()).feed.updated_parsed
    assert invoke("build", f"{upstream.url}/latest", "-o", str(output)).exit_code == 0
    assert feedparser.parse(output.read_bytes()).feed.updated_parsed == alone < other


def test_build_sits_out_a_short_retry_after_as_a_static_build_does(upstream):
    """A 429 with a Retry-After of a second was exit 1 at once, where a static build of the same feed waits and
    succeeds (`Pace`); a long one still fails the run, naming the wait."""
    upstream.rate_limit(read_at("/c/compiler/5"), retry_after=1, times=1)
    result = invoke("build", f"{upstream.url}/c/compiler/5")
    assert result.exit_code == 0, result.stderr
    assert "asked to wait 1s" in result.stderr and feedparser.parse(result.stdout_bytes).entries
    upstream.rate_limit(read_at("/c/compiler/5"), retry_after=600)
    result = invoke("build", f"{upstream.url}/c/compiler/5")
    assert result.exit_code == 1 and "429" in result.stderr, result.stderr
