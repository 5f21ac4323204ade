"""Benchmarks for feedbridge (issue #7): `bench/run` or `python -m bench`.

Every speed claim is a ratio against a baseline measured in the same run, on 127.0.0.1, with bounded
loops: shared machines are noisy, so a lone absolute time would say more about the neighbours than
about feedbridge. Not part of the test suite (one smoke test keeps the harness from rotting).
"""
