"""What flows through endpoints: usage per key and minute, keys' last use, the probe's metric
samples, what the domain tells Prometheus, and the usage and API keys pages."""
