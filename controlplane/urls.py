"""URL map of the control plane: console pages, the management API and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path

from controlplane import signin, sso, views
from controlplane.console import audit, invitations, members, secrets

urlpatterns: list[URLPattern | URLResolver] = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("login/", signin.SignInView.as_view(), name="login"),
    path("login/sso/", sso.sso_start, name="sso-start"),
    path("login/sso/callback/", sso.sso_callback, name="sso-callback"),
    path("logout/", sso.sign_out, name="logout"),
    path("org/switch/", views.switch_organization, name="switch-organization"),
    path("admin/login/", signin.admin_sign_in),  # before the admin's own sign-in form
    path("admin/", admin.site.urls),
    path("api/v1/", include("deployments.api.urls")),  # REST management API (issue 5)
    # Console pages (issue 8): the deployments domain, then platform-wide pages.
    path("", include("deployments.urls")),
    path("members/", members.member_list, name="member-list"),
    path("members/<int:membership_id>/", members.member_change, name="member-change"),
    path(
        "members/invitations/<uuid:invitation_id>/revoke/",
        invitations.invitation_revoke,
        name="invitation-revoke",
    ),
    path("invitations/", invitations.my_invitations, name="invitation-list"),
    path(
        "invitations/<uuid:invitation_id>/",
        invitations.invitation_respond,
        name="invitation-respond",
    ),
    path("secrets/", secrets.secret_list, name="secret-list"),
    path("secrets/<uuid:secret_id>/delete/", secrets.secret_delete, name="secret-delete"),
    path("audit/", audit.audit_log, name="audit-log"),
]

# Plinth's own error answers (never Django's debug or default pages): JSON under /api/.
handler400 = "controlplane.error_pages.bad_request"
handler403 = "controlplane.error_pages.permission_denied"
handler404 = "controlplane.error_pages.page_not_found"
handler500 = "controlplane.error_pages.server_error"
