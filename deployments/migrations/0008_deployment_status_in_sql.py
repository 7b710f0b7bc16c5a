"""Store each endpoint's derived status (filterable and countable in SQL), and let an endpoint
at rest have no next reconcile pass (``next_reconcile_at`` null until something changes).

Existing rows get their status from the same pure ``derive_status`` every writer uses.
"""

import django.utils.timezone
from django.db import migrations, models

from deployments.status import Facts, derive_status, replica_counts


def _number(revision):
    return revision.number if revision is not None else None


def store_derived_statuses(apps, schema_editor):
    deployment_model = apps.get_model("deployments", "Deployment")
    rows = deployment_model.objects.select_related(
        "target_revision", "applied_revision", "current_revision"
    )
    for row in rows.iterator(chunk_size=500):
        applied = _number(row.applied_revision)
        facts = Facts(  # as Deployment.facts() builds them
            desired_state=row.desired_state,
            desired_replicas=row.desired_replicas,
            target_revision=_number(row.target_revision),
            applied_revision=applied,
            current_revision=_number(row.current_revision),
            ready_replicas=row.ready_replicas,
            total_replicas=row.total_replicas,
            first_ready_at=row.first_ready_at,
            failed_at=row.failed_at,
            rollout_in_progress=row.rollout_started_at is not None,
            generation=row.generation,
            observed_generation=row.observed_generation,
            **replica_counts(row.replica_facts or [], applied),
        )
        deployment_model.objects.filter(pk=row.pk).update(status=derive_status(facts))


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0007_shared_cluster_names_unique_no_gpu_inventory"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="status",
            field=models.CharField(default="pending", editable=False, max_length=16),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="next_reconcile_at",
            field=models.DateTimeField(
                blank=True, db_index=True, default=django.utils.timezone.now, null=True
            ),
        ),
        migrations.AddIndex(
            model_name="deployment",
            index=models.Index(
                fields=["organization", "status", "-created_at"],
                name="deployments_organiz_150dc4_idx",
            ),
        ),
        migrations.RunPython(store_derived_statuses, migrations.RunPython.noop),
    ]
