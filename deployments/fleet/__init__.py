"""A fleet: one endpoint's replicas placed across several clusters, failover and drain."""
