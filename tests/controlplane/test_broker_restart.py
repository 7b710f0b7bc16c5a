"""A Celery worker survives its Redis broker restarting or dropping its connections, and no task
is lost or run twice.

Real parts: redis-server started as `make run` starts it (AOF), Plinth's Celery app in a real
worker process (``broker_worker`` adds a task the test holds open), SIGKILL to Redis while a
task runs. Before controlplane/broker.py the worker stopped with "Unrecoverable error:
AttributeError('NoneType' object has no attribute 'hostname')" (kombu's restore_unacked); the
held task's late ack then failed, leaving its message to run again an hour later.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings

from tests.controlplane.scripts import EmbeddedRedis
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@dataclass
class Broker:
    redis: EmbeddedRedis
    queue: str
    log: Path
    release: Path
    worker_log: Path
    worker: subprocess.Popen[bytes] | None = None

    def start_worker(self, concurrency: int) -> None:
        db = settings.DATABASES["default"]
        env = {
            **os.environ,
            "REDIS_URL": self.redis.url,
            "CELERY_QUEUE": self.queue,
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "PYTHONPATH": str(ROOT),
        }
        argv = [sys.executable, "-m", "celery", "-A", "tests.controlplane.broker_worker"]
        argv += ["worker", "-l", "info", "-Q", self.queue, "--concurrency", str(concurrency)]
        with self.worker_log.open("ab") as out:
            self.worker = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        wait_until(lambda: b"ready." in self.worker_log.read_bytes(), "worker ready")

    def send(self, name: str) -> None:
        sender = Celery(broker=self.redis.url)
        sender.send_task(
            "tests.hold", args=[str(self.log), str(self.release), name], queue=self.queue
        )
        sender.close()

    def lose_redis_under_a_running_task(self, lose: Callable[[], None]) -> None:
        """Two worker processes, one running the held task ``a`` and the other polling Redis for
        more (the connection kombu tore down into the AttributeError); then ``lose`` Redis under
        them, and wait until the worker has connected again."""
        self.start_worker(concurrency=2)
        self.send("a")
        wait_until(lambda: "start a" in self.lines(), "task a started")
        lose()
        wait_until(lambda: self.reconnected() or not self.alive(), "reconnected or exited")
        self.assert_alive()

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def restart_redis(self) -> None:
        self.redis.kill()
        self.redis.start()

    def drop_connections(self) -> None:
        """Redis closes every client's connection but this one and stays up."""
        self.redis.client().client_kill_filter(_type="normal", skipme=True)

    def alive(self) -> bool:
        """Running and not on its way out (it waits for its running task before exiting)."""
        running = self.worker is not None and self.worker.poll() is None
        return running and "Unrecoverable error" not in self.worker_log.read_text()

    def reconnected(self) -> bool:
        after_loss = self.worker_log.read_text().split("Connection to broker lost")[1:]
        return bool(after_loss) and "Connected to" in after_loss[-1]

    def assert_alive(self) -> None:
        assert self.alive(), self.worker_log.read_text()[-3000:]

    def assert_nothing_left_to_redeliver(self) -> None:
        client = self.redis.client()
        # kombu keeps delivered, unacknowledged messages here until acked; anything left would
        # run again when the visibility timeout passes.
        wait_until(lambda: client.hlen("unacked") == 0, "every message acknowledged")
        assert client.llen(self.queue) == 0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    redis_server = EmbeddedRedis(tmp_path / "redis")
    redis_server.data_dir.mkdir()
    redis_server.start()
    state = Broker(
        redis_server,
        f"broker-restart-{uuid.uuid4().hex[:8]}",
        tmp_path / "tasks.log",
        tmp_path / "release",
        tmp_path / "worker.log",
    )
    yield state
    if state.worker is not None and state.worker.poll() is None:
        state.worker.terminate()
        try:
            state.worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            state.worker.kill()
            state.worker.wait()
    redis_server.stop()


def test_worker_survives_redis_restarting_under_a_running_task(broker: Broker) -> None:
    broker.lose_redis_under_a_running_task(broker.restart_redis)
    broker.release.touch()
    wait_until(lambda: "done a" in broker.lines(), "task a done")

    broker.send("b")  # the worker still takes new tasks
    wait_until(lambda: "done b" in broker.lines(), "task b done")
    broker.assert_alive()
    broker.assert_nothing_left_to_redeliver()
    assert sorted(broker.lines()) == ["done a", "done b", "start a", "start b"]


def test_a_task_queued_when_redis_dies_runs_once_after_it_restarts(broker: Broker) -> None:
    broker.start_worker(concurrency=1)
    broker.send("a")
    wait_until(lambda: "start a" in broker.lines(), "task a started")
    broker.send("queued")  # the only process is busy: it waits in Redis's list
    wait_until(lambda: broker.redis.client().llen(broker.queue) == 1, "task queued")

    broker.restart_redis()
    assert broker.redis.client().llen(broker.queue) == 1, "the queued task was lost"
    broker.release.touch()
    wait_until(lambda: "done queued" in broker.lines(), "queued task done")
    broker.assert_alive()
    broker.assert_nothing_left_to_redeliver()
    assert sorted(broker.lines()) == ["done a", "done queued", "start a", "start queued"]


def test_a_task_running_when_the_connection_drops_runs_once(broker: Broker) -> None:
    # Redis stays up, so the worker's restore of what it had delivered reaches it at once: the
    # running task's message put back would run it again in the other process.
    broker.lose_redis_under_a_running_task(broker.drop_connections)
    broker.send("b")
    wait_until(lambda: "start b" in broker.lines(), "task b started")
    broker.release.touch()
    wait_until(lambda: "done a" in broker.lines() and "done b" in broker.lines(), "both done")
    broker.assert_nothing_left_to_redeliver()
    broker.assert_alive()
    assert sorted(broker.lines()) == ["done a", "done b", "start a", "start b"]
