"""Benchmarks: retrieval quality on a dataset folder and speed on generated corpora."""
