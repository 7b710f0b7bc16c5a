"""Shared clusters' names are unique too; ``Cluster.gpu_inventory``, never written, is dropped.

The old constraint on ``(organization, name)`` let NULLs differ, so shared clusters (no
organization) could repeat a name: two racing first starts could each create ``local``. Before the
constraint treats NULLs as equal, repeats are merged into the oldest of each name (endpoints
moved onto it, the rest removed); only the built-in local cluster is ever shared, and a local
endpoint's processes are found by its own id, not its cluster's.
"""

from django.db import migrations, models


def merge_repeated_shared_clusters(apps, schema_editor):
    cluster_model = apps.get_model("deployments", "Cluster")
    deployment_model = apps.get_model("deployments", "Deployment")
    kept = {}
    for cluster in cluster_model.objects.filter(organization=None).order_by("created_at", "id"):
        keeper = kept.setdefault(cluster.name, cluster)
        if keeper.pk != cluster.pk:
            deployment_model.objects.filter(cluster=cluster).update(cluster=keeper)
            cluster.delete()
    # The foreign-key checks of those writes are deferred to commit; PostgreSQL refuses to alter
    # a table with checks pending, so they run now.
    schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("controlplane", "0002_invitation"),
        ("deployments", "0006_slug_full_match"),
    ]

    operations = [
        migrations.RunPython(merge_repeated_shared_clusters, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name="cluster", name="unique_cluster_name"),
        migrations.RemoveField(model_name="cluster", name="gpu_inventory"),
        migrations.AddConstraint(
            model_name="cluster",
            constraint=models.UniqueConstraint(
                fields=("organization", "name"), name="unique_cluster_name", nulls_distinct=False
            ),
        ),
    ]
