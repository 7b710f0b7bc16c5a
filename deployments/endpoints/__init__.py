"""An endpoint and its revisions: the records, the writers (create, edit, roll back,
scale, lifecycle), reconcile and rollout, the reads, the settings form, and the endpoint's pages
and API."""
