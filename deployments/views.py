"""Console views of the deployments domain (filled in by the console issue)."""
