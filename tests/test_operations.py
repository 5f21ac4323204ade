"""What an operator reads: `/metrics` (FEEDBRIDGE_METRICS, counted across the Procfile's gunicorn workers,
answered to the allowed peers only), `/healthz` (Redis and each forum's last answer, the forum never asked)
and the version (written once, printed, in the changelog). The release itself, built, installed in a fresh
virtualenv and serving the demo, is `.ci/release`'s check."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from bench.procs import free_port
from feedbridge import __version__
from feedbridge.config import Settings, parse_forum
from feedbridge.store.redis_store import ANSWERS_EVERY
from tests.appserver import (
    PROJECT_ROOT,
    ProcfileApp,
    procfile_app,
    procfile_apps,
    procfile_env,
    running_app,
    settings_for,
    stop,
)
from tests.redis_server import redis_module, redis_server  # noqa: F401  (pytest fixtures)
from tests.test_cli import run
from tests.test_json_logs import lines
from tests.upstream import IDENTITY, FakeForum, list_reads, read_at, stop_together

ON = {"metrics": True}
CLIENT = "X-Forwarded-For"


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, timeout=30, **kwargs)


def scrape(app: ProcfileApp, **kwargs: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """`/metrics`, read with prometheus_client's own parser: each sample's value by its name and labels."""
    response = get(f"{app.url}/metrics", **kwargs)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(value for (sample, sample_labels), value in samples.items()
               if sample == name and set(labels.items()) <= set(sample_labels))


@pytest.fixture(scope="module")
def two_workers() -> Iterator[tuple[ProcfileApp, FakeForum]]:
    """Two worker processes, counting into one set of metrics; JSON request lines say which worker answered."""
    with FakeForum() as forum, procfile_app(settings_for(forum.url, log_format="json", access_log=True, **ON),
                                            workers=2) as app:
        yield app, forum


def test_the_counts_of_two_workers_add_up_in_every_scrape(two_workers):
    app, forum = two_workers
    feeds = [("/c/compiler/5.atom", "category", "atom"), ("/latest.rss", "list", "rss"),
             ("/c/compiler/5.json", "category", "json")]
    answered: Counter[tuple[str, str, str]] = Counter()
    outcomes: Counter[str] = Counter()
    etag, built = "", 0
    for _ in range(60):  # each on a connection of its own: the kernel picks the worker per connection
        for path, kind, fmt in feeds:
            response = get(app.feed_url(path), headers={"If-None-Match": etag} if etag and fmt == "atom" else {})
            answered[kind, fmt, str(response.status_code)] += 1
            outcomes["304" if response.status_code == 304 else response.headers["x-feedbridge-cache"]] += 1
            built += response.headers["x-feedbridge-cache"] == "miss"  # a 304 may have been built, too
            etag = response.headers["etag"] if fmt == "atom" else etag
        answered["unknown", "unknown", str(get(f"{app.url}/no.such.forum/latest.atom").status_code)] += 1
        pids = {line["pid"] for line in lines(app) if line["logger"] == "feedbridge.access"}
        if len(pids) == 2 and outcomes["304"] and sum(answered.values()) >= 40:
            break
    assert len(pids) == 2, "one worker answered every request: nothing shows the counts are added up"
    assert answered["unknown", "unknown", "404"] and outcomes["hit"] and outcomes["miss"] and outcomes["304"]
    # the lists, and the forum's basic info (its icon), read once by each worker that built a feed
    asked, identity = len(list_reads(forum.requests)), forum.count(IDENTITY)
    assert 1 <= identity <= 2
    for _ in range(6):  # whichever worker answers the scrape, it counts both workers' requests
        samples = scrape(app)
        assert {labels: total(samples, "feedbridge_feed_requests_total", kind=labels[0], format=labels[1],
                              status=labels[2]) for labels in answered} == dict(answered)
        assert total(samples, "feedbridge_feed_requests_total") == sum(answered.values())
        assert {outcome: total(samples, "feedbridge_feed_cache_total", outcome=outcome)
                for outcome in ("hit", "stale", "miss", "304")} == {"stale": 0, **outcomes}
        assert total(samples, "feedbridge_feed_build_seconds_count") == built
        assert total(samples, "feedbridge_upstream_requests_total", forum=app.forum_key, kind="list") == asked
        assert total(samples, "feedbridge_upstream_requests_total", forum=app.forum_key, kind="site") == identity
        assert total(samples, "feedbridge_cache_entries") >= 2 * len(feeds)  # each worker holds its own copies
        assert total(samples, "feedbridge_cache_bytes") > 0
    # each worker says its own last answer from the forum: none from one that never asked it (its requests were
    # the unknown forum's 404s), which the kernel's choice of worker per connection may make
    lasts = {get(f"{app.url}/healthz").json()["upstream"][app.forum_key]["last"] for _ in range(12)}
    assert lasts & {"200", "304"} and lasts <= {"200", "304", None}, lasts


@pytest.fixture(scope="module")
def refusing() -> Iterator[dict[str, tuple[ProcfileApp, FakeForum]]]:
    """One server for the forum's Retry-After, the budget and the slot (each refusal met by a client of its
    own: the router's X-Forwarded-For is trusted), one whose CPU allowance is a hundredth of a second, and one
    whose /metrics is allowed to an address that is never the peer."""
    forums = {name: FakeForum().start() for name in ("retry_after", "budget", "slot", "allowance", "hidden")}
    shared = {"trusted_hops": 1, "forum_budget": 6, "cold_slots": 1, "cpu_allowance": 0.0, **ON}
    wanted = {name: settings_for(f"markdown:{forums[name].url}", **shared) for name in ("retry_after", "budget", "slot")}
    wanted["allowance"] = settings_for(f"markdown:{forums['allowance'].url}", cpu_allowance=0.01, **ON)
    wanted["hidden"] = settings_for(forums["hidden"].url, trusted_hops=1, metrics_allow=Settings.from_env(
        {"FEEDBRIDGE_METRICS_ALLOW": "203.0.113.9"}).metrics_allow, **ON)
    try:
        with procfile_apps(wanted) as apps:
            yield {name: (apps[name], forums[name]) for name in wanted}
    finally:
        stop_together(list(forums.values()))


def test_every_kind_of_refusal_is_counted(refusing):
    app, forum = refusing["retry_after"]
    forum.rate_limit("/latest.md", 120)
    assert get(app.feed_url("/latest.atom"), headers={CLIENT: "198.51.100.1"}).status_code == 503  # the forum's 429
    assert get(app.feed_url("/hot.atom"), headers={CLIENT: "198.51.100.1"}).status_code == 503  # its Retry-After
    assert forum.count("/hot.md") == 0

    app, forum = refusing["budget"]  # a client's share: a third of the 6 a minute
    statuses = [get(app.feed_url(f"/{name}.atom"), headers={CLIENT: "198.51.100.2"}).status_code
                for name in ("latest", "hot")]
    # the first feed's list and the forum's basic info (its icon) spend both
    assert statuses == [200, 503] and forum.count("/hot.md") == 0

    app, forum = refusing["slot"]  # the one cold slot, held by a request waiting on a slow forum
    forum.stall("/latest.md", 2)
    held = threading.Thread(target=get, args=(app.feed_url("/latest.atom"),), kwargs={"headers": {CLIENT: "198.51.100.3"}})
    held.start()
    deadline = time.monotonic() + 10
    while forum.count("/latest.md") == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert get(app.feed_url("/hot.atom"), headers={CLIENT: "198.51.100.4"}).status_code == 503
    held.join()

    samples = scrape(app)  # the three forums share this server
    assert {reason: total(samples, "feedbridge_refusals_total", reason=reason)
            for reason in ("retry_after", "budget", "slot", "allowance")} == {
        "retry_after": 1, "budget": 1, "slot": 1, "allowance": 0}
    assert total(samples, "feedbridge_upstream_requests_total", forum=refusing["retry_after"][0].forum_key,
                 status="429") == 1

    app, forum = refusing["allowance"]
    assert get(app.feed_url("/latest.atom")).status_code == 200  # its build spends the allowance
    assert get(app.feed_url("/latest.atom?limit=5")).status_code == 429
    assert total(scrape(app), "feedbridge_refusals_total", reason="allowance") == 1


def test_metrics_are_answered_by_the_peer_never_by_the_forwarded_address(refusing):
    app, _forum = refusing["budget"]  # allowed: 127.0.0.1, the default; the router's header says otherwise
    scraped = get(f"{app.url}/metrics", headers={CLIENT: "203.0.113.9"})
    assert "feedbridge_feed_requests_total" in scraped.text
    # HEAD is GET without the body (RFC 9110 §9.3.2): prometheus_client's own app answered it 405
    headed = httpx.head(f"{app.url}/metrics", timeout=30)
    assert headed.status_code == 200 and headed.content == b"" and "accept-encoding" in headed.headers["vary"].lower()
    assert headed.headers["content-type"] == scraped.headers["content-type"]
    hidden, _forum = refusing["hidden"]  # allowed: 203.0.113.9 only, which the header names and the peer is not
    for headers in ({CLIENT: "203.0.113.9"}, {}):
        refused = get(f"{hidden.url}/metrics", headers=headers)
        assert refused.status_code == 404 and "feedbridge_" not in refused.text


def test_without_metrics_there_is_no_endpoint_and_the_setting_is_checked(upstream):
    with running_app(settings_for(upstream.url)) as app:
        assert get(f"{app.url}/metrics").status_code == 404
    assert Settings.from_env({}).metrics is False
    with pytest.raises(ValueError, match="FEEDBRIDGE_METRICS_ALLOW.*host bits"):
        Settings.from_env({"FEEDBRIDGE_METRICS_ALLOW": "10.0.0.5/8"})
    with pytest.raises(ValueError, match="FEEDBRIDGE_METRICS_ALLOW.*one to"):  # commas naming nobody: every
        Settings.from_env({"FEEDBRIDGE_METRICS_ALLOW": ",,,"})  # scrape was a 404, without a word
    allowed = Settings.from_env({"FEEDBRIDGE_METRICS_ALLOW": "10.0.0.0/8, ::1 192.0.2.7"}).metrics_allow
    assert [str(network) for network in allowed] == ["10.0.0.0/8", "::1/128", "192.0.2.7/32"]


def test_healthz_says_each_forums_last_answer_without_asking_it(upstream):
    with FakeForum() as quiet:
        settings = Settings(forums=(parse_forum(f"markdown:{upstream.url}"), parse_forum(quiet.url)))
        with running_app(settings) as app:
            health = get(f"{app.url}/healthz").json()
            assert health["upstream"] == {app.forum_key: {"last": None, "seconds_ago": None},
                                          quiet.url.removeprefix("http://"): {"last": None, "seconds_ago": None}}
            assert get(app.feed_url("/latest.atom")).status_code == 200
            upstream.fail(read_at("/c/compiler/5"), 500)
            assert get(app.feed_url("/c/compiler/5.atom")).status_code == 502
            asked = upstream.count()
            health = get(f"{app.url}/healthz").json()
            assert upstream.count() == asked and quiet.count() == 0
    assert health["status"] == "ok" and health["redis"] == "not configured"
    assert health["upstream"][app.forum_key]["last"] == "500"
    assert 0 <= health["upstream"][app.forum_key]["seconds_ago"] < 10


def test_healthz_says_whether_redis_answers(upstream, redis_server):  # noqa: F811
    with running_app(settings_for(upstream.url, cache_url=redis_server.url)) as app:
        assert get(f"{app.url}/healthz").json()["redis"] == "answers"
        pings = redis.Redis.from_url(redis_server.url).info("commandstats").get("cmdstat_ping", {}).get("calls", 0)
        started = time.monotonic()
        for _ in range(40):  # anyone's to call, uncharged: one PING a second at most, however often it is asked
            assert get(f"{app.url}/healthz").json()["redis"] == "answers"
        seconds = time.monotonic() - started
        stats = redis.Redis.from_url(redis_server.url).info("commandstats")
        assert stats["cmdstat_ping"]["calls"] - pings <= seconds / ANSWERS_EVERY + 2, (stats["cmdstat_ping"], seconds)
        assert seconds < 20  # a bound that means something: 40 PINGs had it not held
        redis_server.kill()
        time.sleep(ANSWERS_EVERY)
        health = get(f"{app.url}/healthz")
        assert health.status_code == 200 and health.json()["redis"] == "does not answer"


def test_the_version_is_written_once_printed_and_in_the_changelog():
    assert run("--version").stdout.decode() == f"feedbridge, version {__version__}\n"
    assert importlib.metadata.version("feedbridge") == __version__  # the package's metadata reads it
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    changelog = (PROJECT_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"\n## {__version__} - " in changelog and "\n## Unreleased\n" in changelog


def procfile_exit(bad: Mapping[str, str]) -> tuple[int | None, str]:
    """The Procfile's command run as a PaaS runs it (a shell, $PORT set) with default settings but `bad` (and a
    forum nothing listens on): its exit status (None when it still served after 30 s) and all it printed."""
    command = (PROJECT_ROOT / "Procfile").read_text(encoding="utf-8").split("web:", 1)[1].strip()
    settings = Settings(forums=(parse_forum("http://127.0.0.1:9"),))
    env = {**os.environ, **procfile_env(settings), "PORT": str(free_port()), **bad}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    process = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], env=env, cwd=PROJECT_ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = process.communicate(timeout=30)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        stop(process, grace=10)
        return None, process.communicate()[0]


@pytest.mark.parametrize("bad", [
    {"PORT": "0"},
    {"REDIS_URL": "http://x"}, {"REDIS_URL": "redis://:hunter2@[bad"}, {"FEEDBRIDGE_CACHE_URL": "hunter2"},
    {"FEEDBRIDGE_CACHE_URL": "redis://:hunter2@cache:port/0"}, {"REDIS_URL": "redis://:hunter2@127.0.0.1:9/abc"},
], ids=lambda bad: "=".join(*bad.items()))
def test_a_bad_server_setting_is_one_line_naming_it(bad):
    """As a PaaS may set them: the server exits at once with one `Error:` line naming the variable, never each
    worker's traceback and the master's (a Redis URL the workers' store could not read), a random port nobody
    routes to (PORT=0), or the Redis password."""
    code, output = procfile_exit(bad)
    (name, _), = bad.items()
    assert code not in (0, None), output
    assert output.strip().splitlines() == [output.strip()] and output.strip().startswith(f"Error: {name} must be")
    assert "Traceback" not in output and "hunter2" not in output


@pytest.mark.parametrize("bad, words", [
    ({"REDIS_URL": "redis://:hunter2@127.0.0.1:9/0?db=x"}, "Error: FEEDBRIDGE_CACHE_URL / REDIS_URL: Invalid value "
     "for 'db'"),
    ({"FEEDBRIDGE_PERSONAL": "on", "FEEDBRIDGE_SECRET": "0123456789abcdef0", "FEEDBRIDGE_CONNECT_KEY": "hunter2"},
     "Error: FEEDBRIDGE_CONNECT_KEY is not an unencrypted RSA private key"),
], ids=["redis-query", "connect-key"])
def test_a_setting_only_a_worker_can_check_is_one_line_too(bad, words):
    """What only the app's assembly can read (a Redis URL's query as redis-py reads it, the connect key: neither
    library may be imported in the master) stopped each worker with a traceback; now each worker that boots
    says one `Error:` line and the server halts, its reason gunicorn's own line."""
    code, output = procfile_exit({**bad, "WEB_CONCURRENCY": "1"})
    assert code not in (0, None), output
    assert "Traceback" not in output and "hunter2" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert errors == [errors[0]] and errors[0].startswith(words), output
    assert output.rstrip().endswith("Reason: Worker failed to boot."), output


def test_the_master_checks_a_redis_url_without_importing_redis():
    """gunicorn's master reads the settings (the Redis URL among them) before it forks the gevent workers:
    had it imported redis-py, every worker would warn that `ssl` was imported before gevent patched it."""
    check = "import sys, feedbridge.web.gunicorn_conf; sys.exit('redis' in sys.modules)"
    env = {**os.environ, **procfile_env(Settings(forums=(parse_forum("http://127.0.0.1:9"),))),
           "REDIS_URL": "redis://127.0.0.1:9/0"}
    assert subprocess.run([sys.executable, "-c", check], env=env, cwd=PROJECT_ROOT, timeout=60).returncode == 0


def test_a_request_under_way_at_sigterm_has_its_whole_deadline_and_a_blank_setting_is_unset(monkeypatch):
    """gunicorn waited 20 s for the requests under way on SIGTERM (a deploy, a restart), where one may take the
    25 s of FEEDBRIDGE_REQUEST_DEADLINE: those 20 to 25 s old were cut with no answer. And FORWARDED_ALLOW_IPS
    set blank was passed on blank (no proxy trusted), where a blank setting is its default (127.0.0.1)."""
    import runpy

    monkeypatch.setenv("FEEDBRIDGE_REQUEST_DEADLINE", "25")
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", " ")
    conf = runpy.run_module("feedbridge.web.gunicorn_conf")
    assert 25 < conf["graceful_timeout"] < 30 and conf["forwarded_allow_ips"] == "127.0.0.1"
    assert isinstance(conf["graceful_timeout"], int)  # gunicorn refuses a float, and did not start
    monkeypatch.setenv("FEEDBRIDGE_REQUEST_DEADLINE", "7.5")
    assert runpy.run_module("feedbridge.web.gunicorn_conf")["graceful_timeout"] == 10


def test_a_feed_the_forum_fails_is_counted_as_its_kind_and_format():
    """The kind and format of a feed request were read from the URLs answered before, which an error never
    fills: a 502 (the forum failing) or a 404 (a topic the forum does not have) of a feed path was counted as
    `unknown`, which the docs keep for a path that names no feed."""
    with FakeForum() as forum, procfile_app(settings_for(forum.url, **ON), workers=1) as app:
        forum.fail(read_at("/c/compiler/5"), 500)
        assert get(app.feed_url("/c/compiler/5.atom")).status_code == 502
        assert get(app.feed_url("/t/99999999.rss")).status_code == 404
        assert get(f"{app.url}/no.such.forum/latest.atom").status_code == 404
        samples = scrape(app)
    assert total(samples, "feedbridge_feed_requests_total", kind="category", format="atom", status="502") == 1
    assert total(samples, "feedbridge_feed_requests_total", kind="topic_posts", format="rss", status="404") == 1
    assert total(samples, "feedbridge_feed_requests_total", kind="unknown", format="unknown", status="404") == 1
