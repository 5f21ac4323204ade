"""Fixtures shared by every test module."""

import os

import pytest
from hypothesis import settings

from tests.upstream import upstream, upstream_json  # noqa: F401  (the fake forums, as pytest fixtures)

# Property tests: `ci` keeps the suite fast; `HYPOTHESIS_PROFILE=fuzz` is the long run RELIABILITY.md reports. At
# 200 examples they were 60 s of the first part's CPU on each version (test_fuzz alone 54 s), with CI within 10 s of
# its 12 minutes: 100 each (hypothesis's own default), and the fuzz run's 10,000 for depth.
settings.register_profile("ci", max_examples=100, deadline=None)
settings.register_profile("fuzz", max_examples=10_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _one_tls_context_per_configuration() -> None:
    """Every httpx client of the test process (`httpx.get`, a test's `httpx.Client`, an in-process bridge's
    fetcher) builds an SSL context as it is made, loading certifi's bundle: 20 ms of CPU each, and the suite
    makes about 4,000 of them per run on each Python version, a quarter of the first part's CPU, for clients
    that only ever speak plain HTTP to 127.0.0.1. Here the contexts are made once per configuration and shared,
    as one `ssl.SSLContext` may be by any number of connections. Nothing else about a client changes, and
    every request still crosses a real socket; the servers (gunicorn, the fake forum processes) are not this
    process and keep their own."""
    from httpx._transports import default

    made: dict[object, object] = {}
    create = default.create_ssl_context

    def shared(*args: object, **kwargs: object) -> object:
        key = (args, tuple(sorted(kwargs.items())))
        if key not in made:
            made[key] = create(*args, **kwargs)
        return made[key]

    default.create_ssl_context = shared


_one_tls_context_per_configuration()

# Modules that measure a server under load (probes answered within a bound, a p99 beside idle, wrk without a
# socket error, requests that must reach the forum within a second of being counted): `.ci/run` runs them on
# their own after the rest, which it spreads over parallel workers (pytest-xdist), so that what they measure
# is the server and not the suite beside it. The benchmark smoke tests are not among them: they check that
# every row is written, and accept a missed target.
EXCLUSIVE_MODULES = frozenset({"test_budget_windows", "test_connections", "test_cpu_fairness", "test_load",
                               "test_serving", "test_web_hardening"})

# Modules that `.ci/run` runs on the default Python only, not on the newest one beside it. The benchmark smoke
# tests (bench/run runs the benchmarks on the default version) and the tests that drive Chromium (the browser's
# work is the same whichever Python serves the pages). Then the heaviest modules, each 5 to 45 s of CPU in the
# first part where the others take under 5: their CPU goes to our own code over volume (fuzzed and hostile
# pages, thousands of URLs, 500-post feeds) or to servers under abuse, which a Python version does not change,
# and the suite on both versions took 833 s on a 2-core machine, past CI's 12 minutes. At stop 62 it was back at
# 676 to 690 s, and four more went (10 to 17 s each: the static build's many runs, a JSON forum's and core's
# posts and routes end to end); a static build's config is still read on the newest version (test_static_config),
# and a JSON forum served on it (test_what_readers_show). The newest version runs the
# rest, the Procfile's gunicorn among them
# (tests/test_json_logs.py, test_serving.py, test_detect.py, ...).
DEFAULT_VERSION_ONLY = frozenset({
    "test_bench_smoke", "test_browser", "test_personal_browser",
    "test_abuse", "test_admission", "test_cli", "test_control", "test_demo", "test_faults", "test_fuzz",
    "test_hostile_content", "test_hostile_upstream", "test_json_lists", "test_memos", "test_multisite",
    "test_operations", "test_personal", "test_posts", "test_private", "test_redis", "test_redis_limits",
    "test_security", "test_signal", "test_web", "test_web_hardening",
    "test_static", "test_json_source", "test_posts_core", "test_routes_core"})

# The modules that keep one pytest-xdist worker longest (in `.ci/run`'s first part on an idle 2-core machine,
# 15 to 70 s each), longest first: `.ci/run` hands a worker a whole module (`--dist loadfile`) in the order
# collected (`--no-loadscope-reorder`), so these start at once and the rest fill in around them. xdist's own
# order, the modules with the most tests first, left the benchmark smoke tests (three tests, over a minute)
# and test_admission (five) to the end, each on one worker while the others had finished.
# A module missing here only starts later; one renamed is simply no longer first.
LONGEST_FIRST = ("test_bench_smoke", "test_abuse", "test_connections", "test_budget_windows", "test_serving",
                 "test_control", "test_detect", "test_fuzz",
                 "test_admission", "test_hostile_upstream", "test_private", "test_json_source", "test_browser",
                 "test_memos", "test_signal")


def _module_name(item: pytest.Item) -> str:
    return item.module.__name__.rpartition(".")[2] if item.module is not None else ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of `EXCLUSIVE_MODULES` is `exclusive`, but for one marked `waits` or `measures_no_load`. One
    that `waits` spends its time waiting on a deadline of the server's (half a minute of a reader's slow
    slices), which a busy machine does not move; one that `measures_no_load` checks what single requests get.
    Either runs beside the rest rather than keep the exclusive part, which runs alone, that long. Every test of
    `DEFAULT_VERSION_ONLY` is `default_version_only`.

    Then the `LONGEST_FIRST` modules are put first, in that order (a stable sort: each module's tests, and
    every other module, keep the order they were collected in)."""
    for item in items:
        if (_module_name(item) in EXCLUSIVE_MODULES and item.get_closest_marker("waits") is None
                and item.get_closest_marker("measures_no_load") is None):
            item.add_marker(pytest.mark.exclusive)
        if _module_name(item) in DEFAULT_VERSION_ONLY:
            item.add_marker(pytest.mark.default_version_only)
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_module_name(item), len(rank)))
