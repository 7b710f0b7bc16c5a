"""The deployments domain: endpoints, revisions, events, metrics, usage, and how they run."""
