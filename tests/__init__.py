"""Test suite; a package so `python -m tests.upstream` and `from tests.upstream import ...` work."""
