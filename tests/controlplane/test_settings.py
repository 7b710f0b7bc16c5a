"""Settings come from the environment and refuse bad values with the variable's name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_settings(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"}
    }
    clean.update(env)
    clean["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('ok')"],
        env=clean,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root@localhost/plinth",
        "postgres://localhost:notaport/plinth",
        "postgres://localhost",
        "nonsense",
    ],
)
def test_a_malformed_database_url_stops_start_up_naming_it(url: str) -> None:
    result = load_settings(DATABASE_URL=url)
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr
    assert "Traceback" in result.stderr  # Django's own start-up shows it; the last line names it
    assert "DATABASE_URL" in result.stderr.strip().splitlines()[-1]


def test_production_requires_its_secrets() -> None:
    result = load_settings(PLINTH_ENV="production")
    assert result.returncode != 0
    assert "SECRET_KEY is required" in result.stderr.strip().splitlines()[-1]


def test_production_refuses_a_malformed_encryption_key() -> None:
    result = load_settings(
        PLINTH_ENV="production",
        SECRET_KEY="x" * 40,
        PLINTH_ENCRYPTION_KEY="too-short",
        DATABASE_URL="postgres://u@db/plinth",
        REDIS_URL="redis://r:6379/0",
        ALLOWED_HOSTS="plinth.example.com",
    )
    assert result.returncode != 0
    assert "PLINTH_ENCRYPTION_KEY" in result.stderr.strip().splitlines()[-1]


def test_secret_values_can_come_from_files(tmp_path: Path) -> None:
    from cryptography.fernet import Fernet

    key_file = tmp_path / "key"
    key_file.write_text(Fernet.generate_key().decode() + "\n")
    secret_file = tmp_path / "secret"
    secret_file.write_text("s" * 50)
    result = load_settings(
        PLINTH_ENV="production",
        SECRET_KEY_FILE=str(secret_file),
        PLINTH_ENCRYPTION_KEY_FILE=str(key_file),
        DATABASE_URL="postgres://u@db/plinth",
        REDIS_URL="redis://r:6379/0",
        ALLOWED_HOSTS="plinth.example.com",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_standard_library_is_not_shadowed() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import uuid, platform; uuid.uuid4(); print(platform.system()); "
            "import controlplane; assert not hasattr(platform, 'celery_app')",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Linux"
