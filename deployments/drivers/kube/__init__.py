"""The Kubernetes driver: pure renderers, one module that owns the client, and pod observation."""
