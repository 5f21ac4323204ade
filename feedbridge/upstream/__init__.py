"""Upstream HTTP: one bounded fetch from a configured forum (`fetcher`), and a batch run's, which reads local
files too and counts its requests (`batch`)."""
