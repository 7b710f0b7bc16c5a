"""Quality gates: the KL gate's refusals, the writers and the run."""
