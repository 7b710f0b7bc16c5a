"""First-run set-up: an admin user and their organization, with the login printed once."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from controlplane import services


class Command(BaseCommand):
    help = "Create the first organization and admin user if they do not exist."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--organization", default="Default")

    def handle(self, *args: Any, **options: Any) -> None:
        result = services.bootstrap_installation(
            username=options["username"],
            org_name=options["organization"],
            password=secrets.token_urlsafe(12),
        )
        if result.password is not None:
            self.stdout.write(
                "\n  First run: sign in as\n"
                f"    username: {result.username}\n"
                f"    password: {result.password}\n"
                "  (shown once; change it in the console or with "
                "`manage.py changepassword admin`)\n"
            )
        if not settings.PLINTH_PASSWORD_SIGN_IN:
            # That password opens nothing while single sign-on keeps passwords off.
            slug = result.organization.slug
            self.stdout.write(
                "  Password sign-in is off (single sign-on): to administer organization "
                f"{slug!r}, map a group to it in PLINTH_OIDC_GROUP_ROLES, e.g. "
                f'{{"plinth-admins": "{slug}:owner"}}\n'
            )
