"""Per-cluster operator settings (validated ``ClusterSettings``; {} means every default) and the
GPU inventory the worker observes from each Kubernetes cluster's nodes.

``gpu_inventory`` comes back (0007 dropped a column of that name nothing wrote): the worker now
writes it (``deployments.inventory``), the API and console show it, validation warns from it.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0008_deployment_status_in_sql"),
    ]

    operations = [
        migrations.AddField(
            model_name="cluster",
            name="operator_settings",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="cluster",
            name="gpu_inventory",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="cluster",
            name="inventory_observed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
