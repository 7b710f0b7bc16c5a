"""Flushed usage batches, so a flush that dies before deleting one from Redis adds it once."""

from __future__ import annotations

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("deployments", "0004_idempotency_per_caller")]

    operations = [
        migrations.CreateModel(
            name="UsageFlushBatch",
            fields=[
                ("batch", models.CharField(max_length=100, primary_key=True, serialize=False)),
                (
                    "flushed_at",
                    models.DateTimeField(db_index=True, default=django.utils.timezone.now),
                ),
            ],
        ),
    ]
