"""How many replicas an endpoint should have: the pure decision, the inputs gathered for it, the
system's scale asks (autoscale_to, wake) and its tasks."""
