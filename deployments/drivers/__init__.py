"""Drivers place a LaunchPlan on a cluster: Kubernetes (kube/) or this machine (local/)."""
