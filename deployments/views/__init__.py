"""Console views of the deployments domain, one module per page family.

Views parse the request, call one ``deployments.services`` function (or read through
``deployments.queries``) and render a template or a named partial of it. They never import a
driver (import-linter).
"""
