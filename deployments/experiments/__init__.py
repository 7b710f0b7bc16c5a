"""Trying a revision before it serves everyone: canaries, benchmarks and quality gates; their
records, writers, runs, tasks, pages and API."""
