"""Deployments domain models (filled in by the deployments issue)."""
