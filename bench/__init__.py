"""Benchmarks: run as modules, e.g. `python -m bench.ingest`. Not tests: nothing here asserts a speed."""
