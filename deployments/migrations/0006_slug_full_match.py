"""Slugs match whole strings (``\\A...\\Z``); slugs the old ``$`` pattern let in are repaired.

``$`` also matched before a final newline, so ``"name\\n"`` was accepted, and every page listing
that endpoint failed. Such a slug becomes its stripped form when that is valid and free, else
``endpoint-<first 8 hex digits of its id>``.
"""

import re

import django.core.validators
from django.db import migrations, models

_SLUG = re.compile(r"\A(?:[a-z]([a-z0-9-]{0,38}[a-z0-9])?)\Z")


def repair_slugs(apps, schema_editor):
    deployment_model = apps.get_model("deployments", "Deployment")
    taken = set(deployment_model.objects.values_list("slug", flat=True))
    for deployment in deployment_model.objects.all():
        if _SLUG.match(deployment.slug):
            continue
        candidate = deployment.slug.strip()
        if not _SLUG.match(candidate) or candidate in taken:
            candidate = f"endpoint-{deployment.pk.hex[:8]}"
        taken.add(candidate)
        deployment.slug = candidate
        deployment.save(update_fields=["slug"])


class Migration(migrations.Migration):
    dependencies = [("deployments", "0005_usage_flush_batch")]

    operations = [
        migrations.AlterField(
            model_name="deployment",
            name="slug",
            field=models.CharField(
                max_length=40,
                unique=True,
                validators=[
                    django.core.validators.RegexValidator(
                        re.compile("\\A(?:[a-z]([a-z0-9-]{0,38}[a-z0-9])?)\\Z"),
                        "use 1-40 lowercase letters, digits and hyphens, starting with a letter "
                        "and not ending with a hyphen",
                    )
                ],
            ),
        ),
        migrations.RunPython(repair_slugs, migrations.RunPython.noop),
    ]
