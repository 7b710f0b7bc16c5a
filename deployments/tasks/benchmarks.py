"""The benchmark task: take the id, run it (``deployments.benchmark_run``).

Sent by name from ``deployments.benchmarks.create_benchmark`` after commit. A benchmark runs for
minutes, so the task's limits follow the longest profile a benchmark may have.
"""

from __future__ import annotations

from celery import shared_task

from deployments import benchmark_run

__all__: list[str] = ["run_benchmark"]

_LIMIT_S = benchmark_run.RUN_LIMIT_S


@shared_task(
    name="deployments.run_benchmark",
    ignore_result=True,
    soft_time_limit=_LIMIT_S,
    time_limit=_LIMIT_S + 60,
)
def run_benchmark(benchmark_id: str) -> str:
    return benchmark_run.run_benchmark(benchmark_id)
