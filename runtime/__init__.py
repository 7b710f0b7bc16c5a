"""SGLang knowledge for Plinth, free of Django and Kubernetes.

`spec` holds the typed settings of one endpoint, `catalog` the GPU, model and flag data, `validate`
the rules checked before anything is deployed, and `launch` the translation into argv per role.
"""
