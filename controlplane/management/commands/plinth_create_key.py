"""Create an API key from the command line, printing it once: the way to a first management key.

manage.py plinth_create_key --org Default --name cli --kind management --role admin
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from controlplane import services
from controlplane.access import system_actor
from controlplane.models import Organization


class Command(BaseCommand):
    help = "Create an API key for an organization and print it (shown once)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--org", default="Default", help="organization name or slug")
        parser.add_argument("--name", default="cli", help="a label for the key")
        parser.add_argument("--kind", default="management", choices=["management", "inference"])
        parser.add_argument("--role", default="admin", choices=["admin", "developer", "viewer"])

    def handle(self, *args: Any, **options: Any) -> None:
        org = Organization.objects.filter(Q(slug=options["org"]) | Q(name=options["org"])).first()
        if org is None:
            raise CommandError(f"no organization named {options['org']!r}")
        try:
            created = services.create_api_key(
                system_actor(org), name=options["name"], kind=options["kind"], role=options["role"]
            )
        except services.ServiceError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(created.plaintext)
