"""The experiments' REST routes: canaries, benchmarks, quality gates."""
