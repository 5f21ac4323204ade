"""Every regular expression on the request path, timed on adversarial inputs of the longest length it can meet.

A regex with nested quantifiers backtracks exponentially on some inputs: the Host check once took 2.3 s
for 34 labels and froze a worker past its 40 s timeout at 128. The rule is "cap the length first, then
match pieces with flat patterns"; this test holds every compiled pattern there to it, so a new
one that breaks the rule fails here rather than in production. The budget is CPU time with a wide margin
(a linear pattern needs microseconds on these inputs), and the detector itself is checked against the
old Host pattern in a subprocess it may not survive.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import pkgutil
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

import feedbridge
from feedbridge.web.routes import MAX_HOST_CHARS, valid_host
from tests.appserver import running_app, settings_for
from tests.upstream import FakeForum

LENGTH = 4096
"""gunicorn's request-line limit, and above every parameter's cap: no request text reaching a pattern is longer."""
BUDGET = 0.5
"""CPU seconds for all inputs of one pattern; linear patterns need a few milliseconds."""
_ALWAYS = "a.-/:1 \"<%\\\n!é"
_SCANNING = ("search", "finditer", "findall", "sub", "split")


REQUEST_PATH = ("feedbridge.web", "feedbridge.feeds", "feedbridge.upstream", "feedbridge.config",
                "feedbridge.staticsite", "feedbridge.render")
"""Where request text and upstream headers meet patterns; the parsers' own patterns, which read whole
pages, are timed in context on 48 hostile shapes by tests/test_fuzz.py."""


def package_patterns() -> Iterator[tuple[str, re.Pattern[str], bool]]:
    """(name, pattern, scanned): `scanned` when the module calls it with a method that tries every start
    position (`search`, `finditer`, ...), which turns a pattern linear per attempt into a quadratic scan."""
    for info in pkgutil.walk_packages(feedbridge.__path__, "feedbridge."):
        if not info.name.startswith(REQUEST_PATH) or info.name.endswith("gunicorn_conf"):
            continue
        module = importlib.import_module(info.name)
        source = inspect.getsource(module)
        for name, value in vars(module).items():
            scanned = any(f"{name}.{method}(" in source for method in _SCANNING)
            if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                yield f"{info.name}.{name}", value, scanned
            elif isinstance(value, tuple):  # the feed routes are a tuple of (kind, pattern)
                for item in value:
                    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], re.Pattern):
                        yield f"{info.name}.{name}[{item[0]}]", item[1], scanned


def adversarial(pattern: str, length: int = LENGTH) -> Iterator[str]:
    """Runs of one character, and of one or two characters followed by another, from the pattern's own
    characters and a few that end matches early: the shapes that make backtracking explode."""
    chars = sorted({c for c in pattern if c.isprintable()} | set(_ALWAYS))
    for c in chars:
        yield c * length
        yield c * (length - 1) + "\x00"
    for a, b in itertools.permutations(chars, 2):
        for unit in (a + b, a + a + b):
            yield (unit * (length // len(unit) + 1))[:length] + "\x00"


def cpu_cost(compiled: re.Pattern[str], length: int = LENGTH, scanned: bool = True) -> float:
    started = time.process_time()
    for text in adversarial(compiled.pattern, length):
        compiled.fullmatch(text)
        compiled.match(text)
        if scanned:
            compiled.search(text)
    return time.process_time() - started


PATTERNS = sorted(package_patterns(), key=lambda item: item[0])


def test_the_package_patterns_are_found() -> None:
    names = {name for name, _, _ in PATTERNS}
    assert "feedbridge.web.routes._LABEL" in names
    assert any(name.startswith("feedbridge.feeds.request.spec._FEED_ROUTES[") for name in names)
    assert len(PATTERNS) >= 20


@pytest.mark.parametrize(("name", "compiled", "scanned"), PATTERNS, ids=[name for name, _, _ in PATTERNS])
def test_no_pattern_backtracks_on_adversarial_input(name: str, compiled: re.Pattern[str], scanned: bool) -> None:
    cost = cpu_cost(compiled, scanned=scanned)
    assert cost < BUDGET, f"{name} took {cost:.2f}s of CPU on adversarial inputs of {LENGTH} characters"


def test_the_detector_catches_the_old_host_pattern() -> None:
    """The pattern that froze workers must fail this test's budget. The subprocess stops itself once it has
    used the budget (SIGVTALRM: `re` checks signals while it matches), so the old pattern costs half a second
    of CPU here, not the minutes it would take to finish; the timeout is for a detector that hangs."""
    old = r"(?:[A-Za-z0-9-]{1,63}\.?){1,127}(?::\d{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](?::\d{1,5})?"
    script = ("import re, signal; from tests.test_patterns import BUDGET, cpu_cost\n"
              "def over(signum, frame): raise SystemExit('over budget')\n"
              "signal.signal(signal.SIGVTALRM, over); signal.setitimer(signal.ITIMER_VIRTUAL, BUDGET)\n"
              f"cost = cpu_cost(re.compile({old!r}), 300); signal.setitimer(signal.ITIMER_VIRTUAL, 0); print(cost)")
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return
    assert done.returncode == 1 and done.stderr.strip().endswith("over budget") or float(done.stdout) > BUDGET, \
        (done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("host", ["a." * 94 + "aa." * 34, "a" * 63 + ".b", "a-" * 120 + ":80", "[" + ":" * 45 + "]"])
def test_a_host_check_costs_microseconds(host: str) -> None:
    started = time.process_time()
    for _ in range(100):
        valid_host(host)
    assert time.process_time() - started < BUDGET


def test_host_check_accepts_names_addresses_and_ports() -> None:
    for good in ("dev-discuss.pytorch.org", "example.org.", "127.0.0.1:8123", "[::1]:8000", "[::1]", "localhost"):
        assert valid_host(good), good
    for bad in ("a..b", ".a", "a:", "a:123456", "a:80:80", "a_b", "[::1]x", "[::1", "x" * 64 + ".org",
                "a." * 128, "b" * (MAX_HOST_CHARS + 1)):
        assert not valid_host(bad), bad


def test_a_host_of_128_labels_is_answered_at_once_and_cached_feeds_meanwhile(upstream: FakeForum) -> None:
    """Over a real socket: the 128-label Host the old regex spent 40 s on gets its 400 within 2 s, and a
    cached feed asked at the same time answers within 2 s."""
    with running_app(settings_for(upstream.url)) as app:
        feed = app.feed_url("/latest.atom")
        assert httpx.get(feed, timeout=10).status_code == 200
        hostile = "a." * 94 + "aa." * 34
        with httpx.Client(timeout=5) as client:
            started = time.monotonic()
            answer = client.get(feed, headers={"Host": hostile})
            assert time.monotonic() - started < 2
            assert answer.status_code == 400
            assert "Host" in answer.text
            started = time.monotonic()
            assert client.get(feed).status_code == 200
            assert time.monotonic() - started < 2
