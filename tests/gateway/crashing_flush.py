"""Run one usage flush and kill this process with SIGKILL right after its N-th step.

``python -m tests.gateway.crashing_flush N``. A step is anything that leaves a trace outside
the process: a Redis command (a MULTI/EXEC pipeline counts as one), an SQL statement, a
commit. SIGKILL, not an exception: no ``finally`` runs, the Redis lock stays taken and
PostgreSQL rolls back whatever was not committed, exactly as when the worker's machine dies.
The flush is the production code untouched; only its Redis client and database connection
are wrapped to count. Exits 0 (and prints how many steps it took) if the flush finished
before step N.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import django
import redis


class Steps:
    def __init__(self, crash_after: int) -> None:
        self.done = 0
        self.crash_after = crash_after

    def step(self) -> None:
        self.done += 1
        if self.done == self.crash_after:
            os.kill(os.getpid(), signal.SIGKILL)


def counting_redis(url: str, steps: Steps) -> redis.Redis:
    class CountingRedis(redis.Redis):
        def execute_command(self, *args: Any, **options: Any) -> Any:
            result = super().execute_command(*args, **options)
            steps.step()
            return result

        def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
            pipe = super().pipeline(transaction, shard_hint)
            execute = pipe.execute

            def counted(*args: Any, **kwargs: Any) -> Any:
                result = execute(*args, **kwargs)
                steps.step()
                return result

            pipe.execute = counted  # type: ignore[method-assign]
            return pipe

    return CountingRedis.from_url(url, socket_timeout=5)


def main(crash_after: int) -> None:
    django.setup()
    from django.conf import settings
    from django.db import connection

    from deployments.traffic.usage import flush_usage

    steps = Steps(crash_after)

    def counted_sql(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        steps.step()
        return result

    connection.ensure_connection()
    commit = connection.commit

    def counted_commit() -> None:
        commit()
        steps.step()

    connection.commit = counted_commit  # type: ignore[method-assign]
    with connection.execute_wrapper(counted_sql):
        flush_usage(client=counting_redis(settings.REDIS_URL, steps))
    print(steps.done)


if __name__ == "__main__":
    main(int(sys.argv[1]))
