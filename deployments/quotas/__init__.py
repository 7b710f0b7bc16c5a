"""What an organization may ask for, and the one check every writer of replicas calls."""
