"""Benchmarks: traffic profiles, AIPerf's argv and exports, the writers and the run."""
