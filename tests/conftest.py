"""Fixtures shared by every test module."""

from tests.upstream import upstream  # noqa: F401  (the fake forum, as a pytest fixture)
