"""Console views, one module per page family: the deployments domain's pages, and the
organization's own (keys, members, invitations, secrets, audit), which sit here in the front-end
layer with the rest, above the platform they show.

Views parse the request, call one ``deployments.services`` function (or read through
``deployments.queries``) and render a template or a named partial of it. They never import a
driver (import-linter).
"""
