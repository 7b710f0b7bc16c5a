"""/api/v1/deployments/{id}/logs on the local cluster: the process log files, a tail or the lines
after a cursor, every parameter checked and refused by name. (The Kubernetes side, pods and the
previous container, is tests/endpoints/test_kube_logs.py, against the API emulator.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from deployments.endpoints.models import Deployment
from tests.api.conftest import Clients, error_of, fields_of


@pytest.fixture
def run_dir(endpoint: Deployment, settings: Any, tmp_path: Path) -> Path:
    settings.PLINTH_LOCAL_RUN_DIR = str(tmp_path)
    root = tmp_path / str(endpoint.pk)
    root.mkdir()
    return root


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def test_a_developer_reads_and_follows_a_process_log(
    api: Clients, endpoint: Deployment, run_dir: Path
) -> None:
    now = datetime.now(UTC)
    (run_dir / "r1-engine-0.log").write_text(
        "".join(f"{stamp(now - timedelta(minutes=10 - i))} line {i}\n" for i in range(10))
    )
    (run_dir / "router.log").write_text("router up --api-key plinth-engine-key\n")
    body = api.dave.get("deployments/chat/logs?tail=3").json()
    assert body["replica"] == "r1-engine-0" and body["role"] == "engine"
    assert [line["text"].split(" ", 1)[1] for line in body["lines"]] == [
        "line 7",
        "line 8",
        "line 9",
    ]
    written = now - timedelta(minutes=3)
    assert abs(datetime.fromisoformat(body["lines"][0]["ts"]) - written) < timedelta(milliseconds=1)
    assert body["replicas"] == [
        {"name": "r1-engine-0", "role": "engine", "restarts": 0, "has_previous": False},
        {"name": "router", "role": "router", "restarts": 0, "has_previous": False},
    ]
    assert body["continued"] is False and body["previous"] is False

    with (run_dir / "r1-engine-0.log").open("a") as log:
        log.write(f"{stamp(now)} line 10\n")
    after = quote(body["cursor"])
    followed = api.dave.get(f"deployments/chat/logs?after={after}").json()
    assert [line["text"].split(" ", 1)[1] for line in followed["lines"]] == ["line 10"]
    assert followed["continued"] is True and followed["more"] is False

    router = api.dave.get("deployments/chat/logs?role=router").json()
    assert [line["text"] for line in router["lines"]] == ["router up --api-key ***"]
    recent = api.dave.get("deployments/chat/logs?since=150").json()  # seconds before now
    assert [line["text"].split(" ", 1)[1] for line in recent["lines"]] == [
        "line 8",
        "line 9",
        "line 10",
    ]
    since = quote(stamp(now - timedelta(seconds=90)))
    assert len(api.dave.get(f"deployments/chat/logs?since={since}").json()["lines"]) == 2


def test_the_router_log_reads_plain_at_the_times_smg_stamped(
    api: Clients, endpoint: Deployment, run_dir: Path
) -> None:
    # smg colours its lines even into a file, and stamps them in UTC without saying so.
    (run_dir / "router.log").write_text(
        "\x1b[2m2026-12-04 21:35:09\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2msmg::server\x1b[0m"
        "\x1b[2m:\x1b[0m Starting router\n"
        "\x1b[2m2026-12-04 21:35:11\x1b[0m \x1b[33m WARN\x1b[0m \x1b[2msmg::health\x1b[0m"
        "\x1b[2m:\x1b[0m worker \x1b[3murl\x1b[0m\x1b[2m=\x1b[0mhttp://w:1 unhealthy\n"
    )
    body = api.dave.get("deployments/chat/logs?replica=router").json()
    assert [(line["text"], line["level"]) for line in body["lines"]] == [
        ("2026-12-04 21:35:09  INFO smg::server: Starting router", "INFO"),
        ("2026-12-04 21:35:11  WARN smg::health: worker url=http://w:1 unhealthy", "WARNING"),
    ]
    assert [datetime.fromisoformat(line["ts"]) for line in body["lines"]] == [
        datetime(2026, 12, 4, 21, 35, 9, tzinfo=UTC),
        datetime(2026, 12, 4, 21, 35, 11, tzinfo=UTC),
    ]


def test_an_endpoint_without_replicas_has_no_lines(api: Clients, endpoint: Deployment) -> None:
    body = api.alice.get(f"deployments/{endpoint.pk}/logs").json()
    assert body["replica"] == "" and body["lines"] == [] and body["replicas"] == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("tail=0", "tail"),
        ("tail=5001", "tail"),
        ("since=yesterday", "since"),
        ("since=2025-06-01T12:00:00", "since"),  # no zone: whose noon?
        ("since=0", "since"),
        ("role=scheduler", "role"),
        ("replica=r9-engine-0", "replica"),
        ("replica=..%2F..%2Fetc%2Fpasswd", "replica"),
        ("replica=router&role=engine", "replica"),
        ("previous=true", "previous"),  # the local cluster keeps every run in one log
        ("after=..%2Fetc", "after"),
    ],
)
def test_each_refused_parameter_is_named(
    api: Clients, endpoint: Deployment, run_dir: Path, query: str, field: str
) -> None:
    (run_dir / "r1-engine-0.log").write_text("line\n")
    (run_dir / "router.log").write_text("router\n")
    response = api.dave.get(f"deployments/chat/logs?{query}")
    assert response.status_code == 422, response.content
    assert fields_of(response) == [field]


def test_an_unknown_replica_names_the_ones_there_are(
    api: Clients, endpoint: Deployment, run_dir: Path
) -> None:
    (run_dir / "r1-engine-0.log").write_text("line\n")
    error = error_of(api.dave.get("deployments/chat/logs?replica=r1-engine-7"))
    assert error["fields"][0]["code"] == "not_found"
    assert "r1-engine-0" in error["message"]


def test_logs_are_for_developers_of_the_organization(
    api: Clients, endpoint: Deployment, run_dir: Path
) -> None:
    (run_dir / "r1-engine-0.log").write_text("a user's prompt\n")
    refused = api.carol.get("deployments/chat/logs")
    assert refused.status_code == 403 and "developer" in error_of(refused)["message"]
    assert "prompt" not in refused.content.decode()
    assert api.bob.get("deployments/chat/logs").status_code == 404
    assert api.anonymous.get("deployments/chat/logs").status_code == 401
