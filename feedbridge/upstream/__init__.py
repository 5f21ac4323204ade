"""Upstream HTTP: one bounded fetch from a configured forum (`fetcher`), and a politer one for batch runs (`batch`)."""
