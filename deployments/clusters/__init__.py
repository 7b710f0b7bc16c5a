"""Where endpoints run: clusters, which driver runs each (the registry), their observed GPUs, and
the cluster writers."""
