"""Settings are read in one way, with one default each: the one settings.py gives.

A ``getattr(settings, NAME, default)`` carries a second default that can (and did: sweep 5 vs
2 s, settled reconcile 30 vs 10 s, stop grace 5 vs 10 s) disagree with settings.py, and hides a
misspelt name behind it. Beat's schedule is built once, in settings, rather than merged into
``app.conf`` by whichever task modules happen to be imported.
"""

from __future__ import annotations

import ast

from django.conf import settings

from tests.controlplane.source_tree import imports_django_settings, sources

CODE = ("controlplane", "deployments", "gateway")


def test_no_module_reads_a_setting_with_a_default_of_its_own() -> None:
    found = [
        f"{source.name}:{node.lineno}"
        for source in sources(*CODE)
        for node in ast.walk(source.tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"getattr", "hasattr"}
        and node.args
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "settings"
    ]
    assert found == [], "read settings.NAME (settings.py holds the one default): " + str(found)


def _setting_reads() -> dict[str, list[str]]:
    reads: dict[str, list[str]] = {}
    for source in sources(*CODE):
        if not imports_django_settings(source.tree):
            continue
        for node in ast.walk(source.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and isinstance(node.value, ast.Name)
                and node.value.id == "settings"
                and node.attr.isupper()
            ):
                reads.setdefault(node.attr, []).append(f"{source.name}:{node.lineno}")
    return reads


def test_every_setting_the_code_reads_is_defined() -> None:
    reads = _setting_reads()
    assert "PLINTH_SWEEP_LEASE_S" in reads  # the scan sees the engine's reads
    missing = {name: where for name, where in reads.items() if not hasattr(settings, name)}
    assert missing == {}


def test_beat_runs_what_settings_schedule_and_nothing_else() -> None:
    from controlplane.celery import app

    app.autodiscover_tasks(force=True)
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert app.conf.beat_schedule == schedule
    assert {entry["task"] for entry in schedule.values()} <= set(app.tasks)
    assert schedule["deployments.sweep"]["schedule"] == settings.PLINTH_SWEEP_INTERVAL_S
    assert schedule["deployments.probe_due"]["schedule"] == settings.PLINTH_PROBE_INTERVAL_S
    assert schedule["deployments.flush_usage"]["schedule"] == settings.PLINTH_USAGE_FLUSH_S
    assert schedule["deployments.flush_key_last_used"]["schedule"] == settings.PLINTH_USAGE_FLUSH_S


def test_no_module_changes_beats_schedule_at_import() -> None:
    found = [
        f"{source.name}:{node.lineno}"
        for source in sources(*CODE)
        for node in ast.walk(source.tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and node.attr == "beat_schedule"
    ]
    assert found == [], "add the entry to CELERY_BEAT_SCHEDULE in settings.py: " + str(found)
