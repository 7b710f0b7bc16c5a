"""URL map of the control plane: console pages, the management API and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, path

from controlplane import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("org/switch/", views.switch_organization, name="switch-organization"),
    path("admin/", admin.site.urls),
]
