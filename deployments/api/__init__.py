"""The REST management API (django-ninja), mounted at /api/v1/."""
