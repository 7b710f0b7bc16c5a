"""Every stored revision's ``spec_hash`` recomputed as ``RuntimeSpec.content_hash`` now defines it:
over the settings that differ from their defaults, so a field a later version adds at its default
leaves it as it was. Without this, re-applying an endpoint's unchanged settings after the upgrade
would make a new revision, and its quality gate would not count. A stored spec the current
schema no longer parses keeps its hash (it cannot equal anything applied from now on anyway).
"""

from django.db import migrations
from pydantic import ValidationError

from runtime.spec import RuntimeSpec


def rehash(apps, schema_editor):
    revision_model = apps.get_model("deployments", "Revision")
    for revision in revision_model.objects.only("id", "spec", "spec_hash").iterator():
        try:
            spec_hash = RuntimeSpec.model_validate(revision.spec).content_hash()
        except ValidationError:
            continue
        if spec_hash != revision.spec_hash:  # an update: revisions refuse save() once stored
            revision_model.objects.filter(pk=revision.pk).update(spec_hash=spec_hash)


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0024_unanswered_since_log_cursor"),
    ]

    operations = [migrations.RunPython(rehash, migrations.RunPython.noop)]
