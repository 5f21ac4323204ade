"""Fixtures shared by every test module."""

import os

from hypothesis import settings

from tests.upstream import upstream, upstream_json  # noqa: F401  (the fake forums, as pytest fixtures)

# Property tests: `ci` keeps the suite fast; `HYPOTHESIS_PROFILE=fuzz` is the long run RELIABILITY.md reports.
settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("fuzz", max_examples=10_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
