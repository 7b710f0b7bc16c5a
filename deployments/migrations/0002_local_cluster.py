"""The built-in ``local`` cluster: endpoints run as processes on the control plane's machine."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def create_local_cluster(apps: Any, schema_editor: Any) -> None:
    cluster = apps.get_model("deployments", "Cluster")
    if not cluster.objects.filter(organization=None, name="local").exists():
        cluster.objects.create(name="local", kind="local", namespace="local")


class Migration(migrations.Migration):
    dependencies = [("deployments", "0001_initial")]
    operations = [migrations.RunPython(create_local_cluster, migrations.RunPython.noop)]
