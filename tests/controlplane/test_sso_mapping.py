"""The operator's group map for single sign-on: parsed at start-up, refused in plain words,
and a person's groups granting the highest role any of them names."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from controlplane.access import ROLE_RANK
from controlplane.models import Role
from controlplane.sso_mapping import (
    ROLES,
    Grant,
    GroupMapError,
    managed_organizations,
    parse_group_map,
    roles_for,
)
from tests.controlplane.test_settings import load_settings

MAP = {
    "cn=acme-admins,ou=groups,dc=example": "acme:admin",
    "acme-devs": ["acme:developer", "globex:viewer"],
    "/globex/owners": "globex:owner",
}


def test_the_roles_are_the_platforms_roles_lowest_first() -> None:
    assert list(ROLES) == sorted(Role.values, key=lambda role: ROLE_RANK[Role(role)])


def test_a_map_names_groups_with_commas_and_slashes_and_lists_of_grants() -> None:
    parsed = parse_group_map(json.dumps(MAP))
    assert parsed["cn=acme-admins,ou=groups,dc=example"] == (Grant("acme", "admin"),)
    assert parsed["acme-devs"] == (Grant("acme", "developer"), Grant("globex", "viewer"))
    assert managed_organizations(parsed) == {"acme", "globex"}
    assert parse_group_map("") == {}


def test_the_highest_role_any_group_grants_wins() -> None:
    parsed = parse_group_map(json.dumps(MAP))
    both = ["acme-devs", "cn=acme-admins,ou=groups,dc=example"]
    assert roles_for(both, parsed) == {"acme": "admin", "globex": "viewer"}
    assert roles_for(["acme-devs", "/globex/owners"], parsed) == {
        "acme": "developer",
        "globex": "owner",
    }
    assert roles_for(["unmapped"], parsed) == {}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("acme-admins=acme:admin", "is not JSON"),
        ('["acme:admin"]', "must be a JSON object"),
        ('{"g": "acme"}', 'is not "organization-slug:role"'),
        ('{"g": "acme:superuser"}', "unknown role 'superuser'"),
        ('{"g": []}', "grants nothing"),
        ('{"g": 3}', 'is not "organization-slug:role"'),
    ],
)
def test_a_malformed_map_is_refused_saying_where(text: str, says: str) -> None:
    with pytest.raises(GroupMapError, match=says):
        parse_group_map(text)


def test_a_malformed_map_stops_start_up_naming_the_variable() -> None:
    result = load_settings(PLINTH_OIDC_GROUP_ROLES='{"g": "acme:boss"}')
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "PLINTH_OIDC_GROUP_ROLES" in last and "unknown role 'boss'" in last


def test_single_sign_on_needs_its_client() -> None:
    result = load_settings(PLINTH_OIDC_ISSUER="https://idp.example")
    assert result.returncode != 0
    assert "PLINTH_OIDC_CLIENT_ID is required" in result.stderr.strip().splitlines()[-1]


def test_first_run_says_how_to_administer_while_passwords_are_off(
    db: None, settings: object
) -> None:
    settings.PLINTH_PASSWORD_SIGN_IN = False  # type: ignore[attr-defined]
    out = StringIO()
    call_command("plinth_bootstrap", "--organization", "Acme", stdout=out)
    assert 'map a group to it in PLINTH_OIDC_GROUP_ROLES, e.g. {"plinth-admins": "acme:owner"}' in (
        out.getvalue()
    )
