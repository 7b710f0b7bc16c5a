"""The endpoint's REST routes: deployments, revisions, observation (events, metrics,
logs), catalog."""
