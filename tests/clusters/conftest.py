"""The cluster tests reach a cluster on the Kubernetes API emulator, as the endpoints tests do."""

from __future__ import annotations

from tests.endpoints.conftest import emulator  # noqa: F401  (a fixture, shared)
