"""Fixtures shared by every test module."""

import os

import pytest
from hypothesis import settings

from tests.upstream import upstream, upstream_json  # noqa: F401  (the fake forums, as pytest fixtures)

# Property tests: `ci` keeps the suite fast; `HYPOTHESIS_PROFILE=fuzz` is the long run RELIABILITY.md reports.
settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("fuzz", max_examples=10_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Modules that measure a server under load (probes answered within a bound, a p99 beside idle, wrk without a
# socket error, requests that must reach the forum within a second of being counted): `.ci/run` runs them on
# their own after the rest, which it spreads over parallel workers (pytest-xdist), so that what they measure
# is the server and not the suite beside it. The benchmark smoke tests are not among them: they check that
# every row is written, and accept a missed target.
EXCLUSIVE_MODULES = frozenset({"test_budget_windows", "test_connections", "test_cpu_fairness", "test_load",
                               "test_serving", "test_web_hardening"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of `EXCLUSIVE_MODULES` is `exclusive`, but for one marked `waits`: it spends its time waiting
    on a deadline of the server's (half a minute of a reader's slow slices), which a busy machine does not move,
    so it runs beside the rest rather than keep the exclusive part, which runs alone, that long."""
    for item in items:
        if (item.module is not None and item.module.__name__.rpartition(".")[2] in EXCLUSIVE_MODULES
                and item.get_closest_marker("waits") is None):
            item.add_marker(pytest.mark.exclusive)
