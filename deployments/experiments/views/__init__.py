"""The experiments' console pages: canary panel, benchmarks, the experiments tab."""
