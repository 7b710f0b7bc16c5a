"""The end-to-end autoscaling test runs endpoints on the local cluster, as the engine tests do."""

from __future__ import annotations

from tests.endpoints.conftest import fast_local  # noqa: F401  (a fixture, shared)
