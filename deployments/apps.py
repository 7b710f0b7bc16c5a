"""App configuration for the deployments domain."""

from __future__ import annotations

from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    verbose_name = "Endpoints"

    def ready(self) -> None:
        # Imported here: models load only once the app registry is ready.
        from controlplane import key_scope
        from deployments.endpoints.scope import endpoints_among
        from deployments.traffic import telemetry

        # The platform scopes keys to endpoints without importing this domain: it asks this.
        key_scope.register(endpoints_among)
        # ... and serves this domain's families from /metrics the same way.
        telemetry.register()
